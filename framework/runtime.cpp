// Threads, CPU code path, allocator tuning and the runtime report. Nothing here runs when the
// library is loaded: every setting is resolved on first use.
#include <sched.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"

// Weak: with a BLAS other than OpenBLAS these are null and the settings are skipped.
extern "C" __attribute__((weak)) void openblas_set_num_threads(int);
extern "C" __attribute__((weak)) int openblas_get_num_threads(void);
extern "C" __attribute__((weak)) char* openblas_get_corename(void);
extern "C" __attribute__((weak)) char* openblas_get_config(void);

#ifndef XGRAD_VERSION
#define XGRAD_VERSION "unknown"
#endif
#include "xgrad_commit.h"  // XGRAD_GIT_COMMIT, rewritten by every build (cmake/WriteCommit.cmake)

namespace xgrad {
namespace detail {
void blas_single_thread();
}

// --- threads --------------------------------------------------------------------------------
namespace {
int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, int(std::thread::hardware_concurrency()));
}

int default_threads() {
  const char* env = std::getenv("XGRAD_NUM_THREADS");
  if (!env) return available_cores();
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || errno != 0 || n < 1 || n > kMaxThreads)
    throw_error<ValueError>("XGRAD_NUM_THREADS", "must be an integer in [1, ", kMaxThreads, "], got '", env, "'");
  return int(n);
}

std::atomic<int> g_threads{0};  // 0: not resolved yet
}  // namespace

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads)
    throw_error<ValueError>("set_num_threads", "n must be in [1, ", kMaxThreads, "], got ", n);
  g_threads.store(n, std::memory_order_relaxed);
  detail::blas_single_thread();
}

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n != 0) return n;
  n = default_threads();  // may throw: then nothing is stored and the next call throws again
  int expected = 0;
  g_threads.compare_exchange_strong(expected, n, std::memory_order_relaxed);
  return g_threads.load(std::memory_order_relaxed);
}

void detail::blas_single_thread() {
  if (openblas_get_num_threads && openblas_set_num_threads && openblas_get_num_threads() != 1)
    openblas_set_num_threads(1);
}

// --- CPU code path --------------------------------------------------------------------------
namespace {
bool cpu_can_run(CpuPath p) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  switch (p) {
    case CpuPath::Baseline: return true;
    case CpuPath::Avx2:  // x86-64-v3
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
             __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("avx");
    case CpuPath::Avx512:  // x86-64-v4
      return cpu_can_run(CpuPath::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd");
  }
  return false;
#else
  return p == CpuPath::Baseline;  // other targets compile the baseline kernels only
#endif
}

CpuPath parse_path(const std::string& s) {
  for (CpuPath p : {CpuPath::Baseline, CpuPath::Avx2, CpuPath::Avx512})
    if (s == cpu_path_name(p)) return p;
  throw_error<ValueError>("XGRAD_CPU_PATH", "unknown value '", s, "' (expected baseline, avx2 or avx512)");
}

void check_runnable(const char* who, CpuPath p) {
  if (!cpu_can_run(p)) {
    std::string have;
    for (CpuPath q : supported_cpu_paths()) have += std::string(have.empty() ? "" : ", ") + cpu_path_name(q);
    throw_error<ValueError>(who, "this CPU cannot run the ", cpu_path_name(p), " path (it runs: ", have, ")");
  }
}

CpuPath default_path() {
  if (const char* env = std::getenv("XGRAD_CPU_PATH")) {
    const CpuPath p = parse_path(env);
    check_runnable("XGRAD_CPU_PATH", p);
    return p;
  }
  return supported_cpu_paths().back();
}

constexpr int kUnresolved = -1;
std::atomic<int> g_path{kUnresolved};
}  // namespace

const char* cpu_path_name(CpuPath p) {
  switch (p) {
    case CpuPath::Baseline: return "baseline";
    case CpuPath::Avx2: return "avx2";
    case CpuPath::Avx512: return "avx512";
  }
  return "unknown";
}

std::vector<CpuPath> supported_cpu_paths() {
  std::vector<CpuPath> v;
  for (CpuPath p : {CpuPath::Baseline, CpuPath::Avx2, CpuPath::Avx512})
    if (cpu_can_run(p)) v.push_back(p);
  return v;
}

CpuPath cpu_path() {
  const int p = g_path.load(std::memory_order_relaxed);
  if (p != kUnresolved) return CpuPath(p);
  int expected = kUnresolved;
  g_path.compare_exchange_strong(expected, int(default_path()), std::memory_order_relaxed);
  return CpuPath(g_path.load(std::memory_order_relaxed));
}

void set_cpu_path(CpuPath p) {
  check_runnable("set_cpu_path", p);
  g_path.store(int(p), std::memory_order_relaxed);
}

// --- allocator ------------------------------------------------------------------------------
namespace {
std::atomic<std::size_t> g_max_tensor_bytes{0};  // 0: not read yet

std::size_t default_max_tensor_bytes() {
  if (const char* env = std::getenv("XGRAD_MAX_TENSOR_BYTES")) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (errno || end == env || *end || v == 0 || env[0] == '-')
      throw_error<ValueError>("XGRAD_MAX_TENSOR_BYTES", "must be a positive integer (bytes), got '", env, "'");
    return std::size_t(v);
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return std::size_t(pages) * std::size_t(page);
  return std::size_t(16) << 30;
}
}  // namespace

void set_max_tensor_bytes(std::size_t bytes) {
  if (bytes == 0) throw_error<ValueError>("set_max_tensor_bytes", "bytes must be > 0");
  g_max_tensor_bytes.store(bytes, std::memory_order_relaxed);
}

std::size_t max_tensor_bytes() {
  std::size_t v = g_max_tensor_bytes.load(std::memory_order_relaxed);
  if (v == 0) {
    v = default_max_tensor_bytes();
    std::size_t expected = 0;
    if (!g_max_tensor_bytes.compare_exchange_strong(expected, v, std::memory_order_relaxed)) v = expected;
  }
  return v;
}

bool tune_allocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  return true;
#else
  return false;
#endif
}

// --- what ran -------------------------------------------------------------------------------
namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}
std::string trimmed(const char* s) {
  std::string r = s ? s : "";
  while (!r.empty() && (r.back() == ' ' || r.back() == '\n')) r.pop_back();
  return r;
}
}  // namespace

bool detail::blas_core_is_generic(const std::string& core) {
  static const char* const kGeneric[] = {"Katmai",   "Coppermine", "Northwood", "Prescott", "Banias",
                                         "Core2",    "Penryn",     "Dunnington", "Nehalem", "Atom",
                                         "Athlon",   "Opteron",    "Opteron(SSE3)", "Barcelona"};
  return std::find(std::begin(kGeneric), std::end(kGeneric), core) != std::end(kGeneric);
}

RuntimeInfo runtime_info() {
  RuntimeInfo r;
  r.version = XGRAD_VERSION;
  r.commit = XGRAD_GIT_COMMIT;
  r.cpu_model = cpu_model();
  r.cpu_path = cpu_path_name(cpu_path());
  r.blas_core = openblas_get_corename ? trimmed(openblas_get_corename()) : "not OpenBLAS";
  r.blas_config = openblas_get_config ? trimmed(openblas_get_config()) : "";
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  r.blas_coretype_env = env ? env : "";
  // a generic family OpenBLAS chose itself (OPENBLAS_CORETYPE unset: an empty value already
  // makes it pick another)
  const auto paths = supported_cpu_paths();
  if (!env && detail::blas_core_is_generic(r.blas_core) && paths.back() != CpuPath::Baseline)
    r.blas_coretype_hint = paths.back() == CpuPath::Avx512 ? "SkylakeX" : "Haswell";
  r.num_threads = num_threads();
  return r;
}

std::string runtime_summary() {
  const RuntimeInfo r = runtime_info();
  return "xgrad " + r.version + " (" + r.commit + ") | cpu " + r.cpu_model + " | path " + r.cpu_path +
         " | openblas " + r.blas_core +
         (r.blas_coretype_env.empty() ? "" : " (OPENBLAS_CORETYPE=" + r.blas_coretype_env + ")") +
         (r.blas_coretype_hint.empty() ? ""
                                       : " (generic kernels: OpenBLAS does not know this CPU; OPENBLAS_CORETYPE=" +
                                             r.blas_coretype_hint + " picks faster ones)") +
         " | threads " + std::to_string(r.num_threads);
}

}  // namespace xgrad
