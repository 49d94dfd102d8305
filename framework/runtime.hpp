// xgrad/framework/runtime.hpp — process-wide settings.
#pragma once

namespace xgrad {

// Threads for one op: OpenBLAS's GEMM threads (openblas_set_num_threads) and the workers
// of parallel_for (attention heads run in parallel). Small GEMMs are faster on one
// thread; tests use 1. n < 1 is a ValueError. Until set, OpenBLAS's default applies
// (OPENBLAS_NUM_THREADS, else one per core).
void set_num_threads(int n);
int num_threads();

// Memory: tensors are plain heap buffers. When the library loads it tunes glibc malloc
// (M_MMAP_MAX 0: no per-buffer mmap; M_TRIM_THRESHOLD 256 MiB) so that freed tensor
// buffers are reused by the next op instead of being unmapped and faulted in again (page
// faults cost 15-40% of an attention layer's time without it). Set XGRAD_MALLOC_TUNING=0
// in the environment to keep glibc's defaults.

}  // namespace xgrad
