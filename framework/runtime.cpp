// Process-wide settings: BLAS threads and allocator tuning.
#include <malloc.h>

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
std::atomic<int> g_threads{0};  // 0: not set yet, OpenBLAS's own default applies
}

void set_num_threads(int n) {
  if (n < 1) throw ValueError("set_num_threads: n must be >= 1, got " + std::to_string(n));
  g_threads = n;
  openblas_set_num_threads(n);
}

int num_threads() {
  const int n = g_threads;
  return n > 0 ? n : openblas_get_num_threads();
}

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
