// A persistent pool of workers for parallel_for. One call is a Job on the caller's stack: its
// range is cut into chunks that the caller and the woken workers claim with one atomic
// counter, so a chunk runs exactly once whoever gets it, and a worker that is late (asleep, or
// sharing its core with another process) simply claims fewer. The current job and its error are
// guarded by one mutex; a job's count of active workers changes under it and is polled
// without it. A worker that has just finished polls for the next job (and a caller that has
// run out of chunks, for the workers still busy) for at most kPollYields sched_yield()s
// (tens of microseconds) before sleeping on a condition variable: an op sequence (GEMM,
// attention, GEMM, ...) then hands work over without the 30-50 us of a futex wake-up, while a
// core another process wants is handed over at every poll (yield, not a pause loop), so an
// oversubscribed machine loses nothing to it.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "xgrad/framework/parallel.hpp"
#include "xgrad/framework/runtime.hpp"

namespace xgrad {
namespace {

thread_local bool t_inside = false;  // in a parallel_for body: nested calls run inline

using Body = std::function<void(std::size_t, std::size_t)>;
constexpr int kPollYields = 200;

struct Job {
  const Body* body;
  std::size_t n, grain, chunks;
  std::size_t helpers;                  // workers allowed to join: num_threads() - 1
  std::atomic<std::size_t> next{0};     // next unclaimed chunk
  std::atomic<bool> failed{false};      // skip the chunks not started yet
  std::atomic<std::size_t> active{0};   // workers inside run_chunks; changed under Pool::mu_
  std::exception_ptr error;             // guarded by Pool::mu_
};

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  // Runs the job with the pool's workers; false (nothing run) when another thread's job holds
  // the pool.
  bool try_run(Job& job) {
    std::unique_lock<std::mutex> mine(run_mu_, std::try_to_lock);
    if (!mine.owns_lock()) return false;
    // workers_ changes only here, under run_mu_. A thread the system refuses (std::system_error:
    // a process or memory limit) is not retried: the job runs with the workers there are, and
    // the chunks, hence the result's bits, do not depend on how many run them.
    while (workers_.size() < job.helpers && !spawn_refused_) {
      const std::size_t index = workers_.size();
      try {
        workers_.emplace_back([this, index] { work(index); });
      } catch (const std::system_error&) {
        spawn_refused_ = true;
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    run_chunks(job);
    // Every chunk is claimed; wait for the workers still running one (polling first, as the
    // workers do for new jobs). After this no worker can reach the job: job_ is cleared under
    // the lock a worker takes it with.
    for (int i = 0; i < kPollYields && job.active.load(std::memory_order_acquire) != 0; ++i)
      std::this_thread::yield();
    {
      std::unique_lock<std::mutex> lk(mu_);
      done_.wait(lk, [&] { return job.active.load(std::memory_order_relaxed) == 0; });
      job_ = nullptr;
    }
    if (job.error) std::rethrow_exception(job.error);
    return true;
  }

 private:
  void run_chunks(Job& job) {
    t_inside = true;
    for (;;) {
      const std::size_t c = job.next.fetch_add(1, std::memory_order_relaxed);
      if (c >= job.chunks) break;
      if (job.failed.load(std::memory_order_relaxed)) continue;
      const std::size_t begin = c * job.grain, end = std::min(job.n, begin + job.grain);
      try {
        (*job.body)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!job.error) job.error = std::current_exception();
        job.failed.store(true, std::memory_order_relaxed);
      }
    }
    t_inside = false;
  }

  void work(std::size_t index) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (generation_.load(std::memory_order_relaxed) == seen && !stop_) {
        lk.unlock();
        for (int i = 0; i < kPollYields && generation_.load(std::memory_order_acquire) == seen; ++i)
          std::this_thread::yield();
        lk.lock();
      }
      wake_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      Job* job = job_;
      if (!job || index >= job->helpers) continue;
      ++job->active;
      lk.unlock();
      run_chunks(*job);
      lk.lock();
      if (job->active.fetch_sub(1, std::memory_order_release) == 1) done_.notify_all();
    }
  }

  std::mutex run_mu_;  // held by the thread whose job the pool runs
  bool spawn_refused_ = false;  // under run_mu_: the system refused a thread, the pool grows no more
  std::mutex mu_;      // guards everything below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};  // written under mu_; polled without it
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

std::atomic<std::size_t> g_min_parallel_work{kMinParallelWork};

}  // namespace

std::size_t detail::min_parallel_work() { return g_min_parallel_work.load(std::memory_order_relaxed); }
void detail::set_min_parallel_work(std::size_t work) { g_min_parallel_work.store(work, std::memory_order_relaxed); }

void parallel_for(std::size_t n, std::size_t cost_per_item, const Body& body) {
  if (n < 2 || t_inside) return body(0, n);
  const std::size_t bound = detail::min_parallel_work();
  const bool small = cost_per_item < bound && n * cost_per_item < bound;
  const std::size_t threads = std::min<std::size_t>(std::size_t(num_threads()), n);
  if (threads <= 1 || small) return body(0, n);
  // About four chunks per thread: enough for a late thread to be covered by the others,
  // few enough that claiming one costs nothing next to its work.
  const std::size_t target = std::min(n, threads * 4);
  Job job;
  job.body = &body;
  job.n = n;
  job.grain = (n + target - 1) / target;
  job.chunks = (n + job.grain - 1) / job.grain;
  job.helpers = threads - 1;
  if (!pool().try_run(job)) body(0, n);
}

}  // namespace xgrad
