// A persistent pool of num_threads() - 1 workers woken per parallel_for.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "xgrad/framework/parallel.hpp"
#include "xgrad/framework/runtime.hpp"

extern "C" void openblas_set_num_threads(int);

namespace xgrad {
namespace {

thread_local bool t_inside = false;

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

  void run(std::size_t n, std::size_t parts, const std::function<void(std::size_t, std::size_t)>& body) {
    std::lock_guard<std::mutex> one_at_a_time(run_mu_);
    while (workers_.size() + 1 < parts) {
      const std::size_t index = workers_.size() + 1;
      workers_.emplace_back([this, index] { work(index); });
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      body_ = &body, n_ = n, parts_ = parts, pending_ = parts - 1, error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    call(0, body);
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return pending_ == 0; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void call(std::size_t part, const std::function<void(std::size_t, std::size_t)>& body) {
    t_inside = true;
    try {
      body(n_ * part / parts_, n_ * (part + 1) / parts_);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside = false;
  }
  void work(std::size_t index) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= parts_) continue;
      const auto* body = body_;
      lk.unlock();
      call(index, *body);
      lk.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(std::size_t, std::size_t)>* body_ = nullptr;
  std::size_t n_ = 0, parts_ = 1, pending_ = 0;
  std::uint64_t generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void parallel_for(std::size_t n, std::size_t cost_per_item,
                  const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t threads = std::size_t(num_threads());
  const bool small = cost_per_item < kMinParallelWork && n * cost_per_item < kMinParallelWork;
  if (threads <= 1 || n < 2 || t_inside || small) return body(0, n);
  const std::size_t parts = std::min(threads, n);
  openblas_set_num_threads(1);
  try {
    pool().run(n, parts, body);
  } catch (...) {
    openblas_set_num_threads(int(threads));
    throw;
  }
  openblas_set_num_threads(int(threads));
}

}  // namespace xgrad
