// xgrad/framework/parallel.hpp — fork-join over the configured threads, for op kernels.
#pragma once
#include <cstddef>
#include <functional>

namespace xgrad {

// Calls body(begin, end) on disjoint ranges that together cover [0, n) exactly once, on up to
// num_threads() threads (the calling thread works too), and returns when all are done. Ranges
// are handed out in chunks as threads become free, so which thread runs which range, and how
// [0, n) is cut, vary from call to call: body must give the same results for any partition
// (each item's arithmetic its own), which is what makes every op bit-identical for any thread
// count. The first exception a range throws is rethrown here (the remaining ranges are
// skipped).
// Runs body(0, n) inline when one thread is configured, n < 2, when called from inside
// another parallel_for, when the pool is busy with another user thread's call, or when the
// work is too small to pay for waking a thread: n * cost_per_item < kMinParallelWork (cost in
// multiply-adds or comparable simple operations). Idle workers poll briefly with sched_yield
// (which hands the core to any other thread that wants it), then sleep: no busy spinning.
constexpr std::size_t kMinParallelWork = std::size_t(1) << 17;
void parallel_for(std::size_t n, std::size_t cost_per_item,
                  const std::function<void(std::size_t begin, std::size_t end)>& body);

}  // namespace xgrad
