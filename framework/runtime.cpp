// Process-wide settings: BLAS threads and allocator tuning.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"

extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);

namespace xgrad {

namespace {
// xgrad's thread count. OpenBLAS itself always runs single-threaded: xgrad splits large GEMMs
// and attention heads over its own parallel_for workers, so no second pool of BLAS threads
// spins for the same cores. The default is OpenBLAS's (OPENBLAS_NUM_THREADS, else one per
// core), read once when the library loads.
struct Threads {
  std::atomic<int> n;
  Threads() : n(std::max(1, openblas_get_num_threads())) { openblas_set_num_threads(1); }
};
Threads& threads() {
  static Threads t;
  return t;
}
const bool threads_initialised = (threads(), true);
}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw ValueError("set_num_threads: n must be >= 1, got " + std::to_string(n));
  threads().n = n;
  openblas_set_num_threads(1);
}

int num_threads() { return threads().n; }

namespace {
struct MallocTuning {
  MallocTuning() {
    const char* env = std::getenv("XGRAD_MALLOC_TUNING");
    if (env && std::strcmp(env, "0") == 0) return;
    mallopt(M_MMAP_MAX, 0);               // large buffers come from the heap too, and are reused
    mallopt(M_TRIM_THRESHOLD, 256 << 20); // keep up to 256 MiB of freed heap for the next step
  }
} const tuning;
}  // namespace

}  // namespace xgrad
