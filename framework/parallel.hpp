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
// multiply-adds or comparable simple operations; an element of a memory-bound loop, such as
// an elementwise op's, a sum's or a gradient accumulation's, counts kElementCost). Idle
// workers poll briefly with sched_yield (which hands the core to any other thread that wants
// it), then sleep: no busy spinning.
// The bound: a worker asleep joins a job ~30 us late, and a loop split across cores leaves its
// output in the other core's cache for the next op. Two threads against one, per call, on a 2-vCPU
// Xeon (KVM): elementwise loops of 128-192 Ki elements 3-3.9x the time (9-15 us on one), column
// sums of 128 Ki 1.6x, attention heads (MHA small, the reverse model) 1.01-1.08x at 1-3 Mi units
// and 0.91x at 6.5 Mi; loops of 1 Mi elements 0.54x (elementwise) and 0.95x (column sums), of 3 Mi
// 0.89x; attention and GEMM calls of 8-26 Mi units 0.57-0.67x. On one thread an element of such a
// loop took ~0.07 ns (in L2), an attention unit 0.02-0.05 ns, a GEMM multiply-add ~0.014 ns: hence
// kElementCost, which puts the bound at ~1 Mi elements. With 2^17 and elements at 1 (before) the
// reverse model's training step ran 1.04-1.15x slower on two threads than on one; with these
// 0.98-1.01x the time, while MHA mid keeps 1.22-1.24x and large 2.02-2.09x from the second thread
// (docs/PERFORMANCE_HISTORY.md, thirty-first round).
constexpr std::size_t kMinParallelWork = std::size_t(1) << 23;
constexpr std::size_t kElementCost = 8;
void parallel_for(std::size_t n, std::size_t cost_per_item,
                  const std::function<void(std::size_t begin, std::size_t end)>& body);

namespace detail {
// The bound parallel_for applies: kMinParallelWork unless set here. The test suite sets it to 1
// while it runs ops on several threads, so that its thread-count checks split small inputs too.
std::size_t min_parallel_work();
void set_min_parallel_work(std::size_t work);
}  // namespace detail

}  // namespace xgrad
