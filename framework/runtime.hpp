// xgrad/framework/runtime.hpp — threads, the CPU code path, and what ran (for reports).
//
// Loading the library changes nothing in the host process. Process-wide settings change only
// when the program asks or when an op needs them, as documented below.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace xgrad {

// --- threads ------------------------------------------------------------------------------
// Threads for one op: large GEMMs run as fixed blocks and attention heads in parallel, on
// parallel_for's workers (framework/parallel.hpp). Results never depend on the thread count:
// how an op splits its work is a function of the shapes only wherever the split could change
// a bit, so every op, model and example gives the same bits for any n (tests/test_parallel.cpp).
// Default: the environment variable XGRAD_NUM_THREADS if set (an integer in [1, 1024]; anything
// else is a ValueError at first use), else the number of cores this process may run on
// (sched_getaffinity). n outside [1, kMaxThreads] is a ValueError. When the system refuses
// a worker thread (a process limit), work runs on the threads there are: same results.
constexpr int kMaxThreads = 1024;
void set_num_threads(int n);
int num_threads();

// OpenBLAS: xgrad calls it from its own threads and needs it single-threaded (a multi-threaded
// GEMM splits the product by the thread count, which changes the last bits of the result).
// The first xgrad GEMM, and set_num_threads, call openblas_set_num_threads(1); a GEMM that
// finds OpenBLAS set to more threads again (by the host program) sets it back to 1.

// --- CPU code path --------------------------------------------------------------------------
// Float32 kernels that profit from wider vectors (GELU, layer_norm rows, attention's softmax
// rows) are compiled three times and picked per call: x86-64 baseline (SSE2), AVX2 + FMA
// (x86-64-v3) and AVX-512 (x86-64-v4). The default is the best this CPU runs. The environment
// variable XGRAD_CPU_PATH = baseline | avx2 | avx512 forces one (read at first use); an unknown
// value or a path this CPU cannot run is a ValueError then, never an illegal instruction.
// Paths differ in the last bits of float32 results (FMA contraction, vector width); each is
// tested (scripts/run-tests.sh runs the numeric suites once per path the CPU supports).
enum class CpuPath { Baseline, Avx2, Avx512 };
CpuPath cpu_path();
void set_cpu_path(CpuPath path);             // ValueError if this CPU cannot run it
std::vector<CpuPath> supported_cpu_paths();  // ascending; always holds Baseline
const char* cpu_path_name(CpuPath path);     // "baseline", "avx2", "avx512"

// --- allocator ------------------------------------------------------------------------------
// Opt-in glibc malloc tuning for training loops: M_MMAP_MAX 0 (no per-buffer mmap) and
// M_TRIM_THRESHOLD 256 MiB, so that freed tensor buffers are reused by the next step instead
// of being unmapped and faulted in again. Without it a loop over MHA large (B 4, T 512, E 512)
// forward + backward takes ~10,000 page faults a call and 1.9-2.3x the time (194-243 against
// 104-107 ms on a Zen 5 core; 15-40% on the smaller layers measured before). Process-wide,
// hence never done implicitly; call it once at the start of a training program, as the
// examples and benchmarks do. Returns false (and does nothing) where the C library is not glibc.
bool tune_allocator();

// --- size limit -----------------------------------------------------------------------------
// The largest single tensor buffer, in bytes. Every allocation whose size a user's argument
// decides is checked against it before anything is allocated, and fails with MemoryError
// naming the op and the shape (framework/errors.hpp); the tensor allocator (framework/
// array.hpp) checks it again for every buffer and turns a failed allocation (genuine
// out-of-memory) into MemoryError too. Element counts are capped at 2^40 separately (a
// ValueError). Default: the machine's physical memory (sysconf; 16 GiB if unknown): a single
// tensor larger than RAM is never useful, and asking the allocator for it either fails
// after a long wait or, with overcommit, gets the process killed later. The environment
// variable XGRAD_MAX_TENSOR_BYTES (a positive integer, read at first use; anything else is a
// ValueError then) or set_max_tensor_bytes overrides it. bytes == 0 is a ValueError.
void set_max_tensor_bytes(std::size_t bytes);
std::size_t max_tensor_bytes();

// --- what ran -------------------------------------------------------------------------------
// For metrics files and benchmark output: results may depend on the CPU (the code path and
// OpenBLAS's kernels), never on the thread count.
struct RuntimeInfo {
  std::string version;          // xgrad's version, and the git commit it was built from
  std::string commit;
  std::string cpu_model;        // /proc/cpuinfo's "model name" (or "unknown")
  std::string cpu_path;         // cpu_path_name(cpu_path())
  std::string blas_core;        // OpenBLAS's kernel family (openblas_get_corename())
  std::string blas_config;      // openblas_get_config()
  std::string blas_coretype_env;  // OPENBLAS_CORETYPE as set in the environment, or ""
  // OpenBLAS runs its generic pre-AVX kernels (Prescott, Core2, Nehalem, ...) of its own accord
  // on a CPU that runs xgrad's avx2 or avx512 path: it does not know the CPU (OpenBLAS 0.3.21 on
  // an Intel Xeon of family 6 model 207: Prescott, sgemm at ~21 GFLOP/s against ~145 with its
  // SkylakeX kernels). xgrad's float32 products then mostly run its own kernels, and its float64
  // GEMMs all of them (ops/tiled_gemm_f64.cpp), but the float32 products still routed to
  // OpenBLAS (a transposed B under 128 rows, very wide products) run slowly. blas_coretype_hint
  // names the family to pin with OPENBLAS_CORETYPE (SkylakeX or Haswell) then, and is ""
  // otherwise; runtime_summary shows it.
  std::string blas_coretype_hint;
  int num_threads = 1;
};
RuntimeInfo runtime_info();
std::string runtime_summary();
namespace detail {
// Whether `core` (RuntimeInfo::blas_core) is one of OpenBLAS's families older than AVX (Prescott,
// Core2, Nehalem, ...): its fallbacks for CPUs it does not know.
bool blas_core_is_generic(const std::string& core);
}  // namespace detail  // one line: "xgrad 0.1.0 (abc1234) | cpu ... | path avx512 | ..."

}  // namespace xgrad
