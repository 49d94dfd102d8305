// xgrad/framework/runtime.hpp — process-wide settings.
#pragma once

namespace xgrad {

// Threads OpenBLAS may use for one GEMM (openblas_set_num_threads). Small GEMMs are faster
// on one thread; tests use 1. n < 1 is a ValueError.
void set_num_threads(int n);
int num_threads();

}  // namespace xgrad
