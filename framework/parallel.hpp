// xgrad/framework/parallel.hpp — fork-join over the configured threads, for op kernels.
#pragma once
#include <cstddef>
#include <functional>

namespace xgrad {

// Calls body(begin, end) on a partition of [0, n) into at most num_threads() contiguous
// ranges, one per thread (the calling thread runs the first), and returns when all are
// done. The first exception a range throws is rethrown here. Runs body(0, n) inline when
// one thread is configured, n < 2, when called from inside another parallel_for, or when
// the work is too small to pay for waking a thread: n * cost_per_item < kMinParallelWork
// (cost in multiply-adds or comparable simple operations).
// GEMMs inside a body run on their own thread (OpenBLAS is single-threaded, see
// runtime.hpp, and a nested parallel_for runs inline). One parallel_for runs at a time
// (calls from several user threads queue).
constexpr std::size_t kMinParallelWork = std::size_t(1) << 17;
void parallel_for(std::size_t n, std::size_t cost_per_item,
                  const std::function<void(std::size_t begin, std::size_t end)>& body);

}  // namespace xgrad
