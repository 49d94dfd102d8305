// xgrad/framework/runtime.hpp — process-wide settings.
#pragma once

namespace xgrad {

// Threads for one op: large GEMMs are split into row (or column) blocks and attention
// heads run in parallel, on parallel_for's workers; OpenBLAS itself is kept at one thread
// (one pool of threads, not two competing for the cores). Small work stays on the calling
// thread. Tests use 1. n < 1 is a ValueError. Default: OpenBLAS's default count
// (OPENBLAS_NUM_THREADS, else one per core).
void set_num_threads(int n);
int num_threads();

// Memory: tensors are plain heap buffers. When the library loads it tunes glibc malloc
// (M_MMAP_MAX 0: no per-buffer mmap; M_TRIM_THRESHOLD 256 MiB) so that freed tensor
// buffers are reused by the next op instead of being unmapped and faulted in again (page
// faults cost 15-40% of an attention layer's time without it). Set XGRAD_MALLOC_TUNING=0
// in the environment to keep glibc's defaults.

}  // namespace xgrad
