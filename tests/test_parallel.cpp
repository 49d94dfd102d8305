// parallel_for and the GEMM split over threads: coverage, exceptions, nesting, and results
// equal to one thread for every transpose combination in both split directions.
#include <atomic>
#include <array>
#include <stdexcept>
#include <thread>

#include "helpers.hpp"
#include "xgrad/framework/parallel.hpp"

using namespace xgrad;
using xgrad::test::allclose;
using xgrad::test::with_threads;

BOOST_AUTO_TEST_SUITE(parallel)

BOOST_AUTO_TEST_CASE(every_index_runs_exactly_once) {
  with_threads(2, [] {
    for (std::size_t n : {0, 1, 2, 3, 17, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      parallel_for(n, kMinParallelWork, [&](std::size_t begin, std::size_t end) {
        ++calls;
        for (std::size_t i = begin; i < end; ++i) ++hits[i];
      });
      for (std::size_t i = 0; i < n; ++i) BOOST_TEST(hits[i].load() == 1);
      BOOST_TEST(calls.load() == (n >= 2 ? 2 : 1));
    }
  });
}

BOOST_AUTO_TEST_CASE(small_work_and_nested_calls_run_inline) {
  with_threads(2, [] {
    const auto caller = std::this_thread::get_id();
    bool inline_small = true;
    parallel_for(8, 1, [&](std::size_t, std::size_t) { inline_small &= std::this_thread::get_id() == caller; });
    BOOST_TEST(inline_small);
    std::atomic<int> nested_calls{0}, nested_inline{0};  // Boost.Test asserts on this thread only
    parallel_for(2, kMinParallelWork, [&](std::size_t, std::size_t) {
      const auto me = std::this_thread::get_id();
      parallel_for(4, kMinParallelWork, [&](std::size_t b, std::size_t e) {
        ++nested_calls;
        if (b == 0 && e == 4 && std::this_thread::get_id() == me) ++nested_inline;
      });
    });
    BOOST_TEST(nested_calls.load() == 2);
    BOOST_TEST(nested_inline.load() == 2);
  });
}

BOOST_AUTO_TEST_CASE(an_exception_in_any_range_reaches_the_caller) {
  with_threads(2, [] {
    for (std::size_t bad : {0, 1}) {
      BOOST_CHECK_THROW(parallel_for(2, kMinParallelWork,
                                     [&](std::size_t b, std::size_t) {
                                       if (b == bad) throw std::runtime_error("range failed");
                                     }),
                        std::runtime_error);
    }
    std::atomic<int> after{0};  // the pool still works
    parallel_for(2, kMinParallelWork, [&](std::size_t b, std::size_t e) { after += int(e - b); });
    BOOST_TEST(after.load() == 2);
  });
}

BOOST_AUTO_TEST_CASE(split_gemms_match_one_thread) {
  Rng rng(21);
  // (n, k, m): tall (split by rows) and wide (split by columns), above the split threshold.
  for (auto [n, k, m] : {std::array<std::size_t, 3>{300, 70, 90}, std::array<std::size_t, 3>{60, 80, 333}}) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      Tensor a = randn(ta ? Shape{k, n} : Shape{n, k}, rng), b = randn(tb ? Shape{m, k} : Shape{k, m}, rng);
      a.set_requires_grad(true);
      b.set_requires_grad(true);
      Tensor g = randn({n, m}, rng);
      auto run = [&] {
        Tensor y = matmul(a, b, ta, tb);
        auto grads = grad({y}, {a, b}, {g});
        return std::vector<Tensor>{y, grads[0], grads[1]};
      };
      const auto one = run();
      std::vector<Tensor> two;
      with_threads(2, [&] { two = run(); });
      for (std::size_t i = 0; i < 3; ++i)
        BOOST_TEST_CONTEXT("flags " << flags << " n " << n << " output " << i)
        BOOST_TEST(allclose(two[i], one[i], 1e-5, 1e-5));
    }
  }
}

BOOST_AUTO_TEST_CASE(threaded_elementwise_bias_and_column_sums_are_bit_identical) {
  Rng rng(22);
  Tensor x = randn({700, 300}, rng), y = randn({700, 300}, rng), w = randn({200, 300}, rng), b = randn({200}, rng);
  auto run = [&] {
    std::vector<double> all;
    for (const Tensor& t : {mul(x, y), add(x, y), sum(x, {0}), sum(reshape(x, {7, 100, 300}), {0, 1}),
                            linear(x, w, b)}) {
      auto v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const auto one = run();
  std::vector<double> two;
  with_threads(2, [&] { two = run(); });
  BOOST_TEST(one == two);
}

BOOST_AUTO_TEST_SUITE_END()
