// Loading libxgrad changes nothing in the host process (framework/runtime.hpp): OpenBLAS's
// thread count and glibc malloc's mmap behaviour are as the host left them until the program
// calls into xgrad. Run with OPENBLAS_NUM_THREADS=2 (tests/CMakeLists.txt). Exit 0 = pass.
#include <cblas.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <iostream>

#include <xgrad/xgrad.hpp>

#include "../sanitized.hpp"

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    std::cout << (ok ? "ok    " : "FAIL  ") << what << "\n";
    failures += !ok;
  };
  check(openblas_get_num_threads() == 2, "OpenBLAS keeps the host's 2 threads after the library loaded");
#if defined(XGRAD_TEST_SANITIZED)
  std::cout << "skip  malloc check: a sanitizer replaces glibc's malloc in this build\n";
#elif defined(__GLIBC__)
  {
    char* volatile big = static_cast<char*>(std::malloc(std::size_t(64) << 20));  // above the mmap threshold
    big[0] = 1;
    check(mallinfo2().hblks >= 1, "a 64 MiB malloc is still mmapped (no M_MMAP_MAX 0 at load)");
    std::free(big);
  }
#endif
  // The first xgrad GEMM sets OpenBLAS to one thread (documented), and results need it.
  xgrad::Rng rng(1);
  xgrad::Tensor y = xgrad::matmul(xgrad::randn({8, 8}, rng), xgrad::randn({8, 8}, rng));
  check(y.shape() == xgrad::Shape({8, 8}), "an xgrad op runs");
  check(openblas_get_num_threads() == 1, "after an xgrad GEMM OpenBLAS runs single-threaded");
  return failures == 0 ? 0 : 1;
}
