// Stress for the thread pool and the ops that split work, meant to run under ThreadSanitizer
// too (scripts/run-tests.sh builds build-tsan/ and runs this suite there): many thousands of
// parallel_for calls and GEMM-splitting ops of alternating shapes, thread counts changing
// between 2 and 8, several user threads running ops at once. Every result is checked: each
// range runs exactly once, and every op's output equals its one-thread reference bit for bit.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "helpers.hpp"
#include "sanitized.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/parallel.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;

namespace {

bool same_bits(const Tensor& a, const std::vector<double>& ref) {
  const auto v = a.to_vector();
  return v.size() == ref.size() && std::memcmp(v.data(), ref.data(), v.size() * sizeof(double)) == 0;
}

// Sanitizer builds are 5-20x slower: fewer repetitions there, same coverage of shapes.
#ifdef XGRAD_TEST_SANITIZED
constexpr int kScale = 1;
#else
constexpr int kScale = 5;
#endif

// f() once per round, the thread count cycling through 2..8, every parallel_for split
// (test::SplitAllWork); back to the suite's 1 after.
template <class F> void with_cycling_thread_counts(int rounds, F&& f) {
  test::SplitAllWork split;
  for (int round = 0; round < rounds; ++round) {
    set_num_threads(2 + round % 7);
    f();
  }
  set_num_threads(1);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(threads_stress)

BOOST_AUTO_TEST_CASE(parallel_for_alternating_sizes_and_thread_counts) {
  std::size_t calls = 0, wrong = 0;
  with_cycling_thread_counts(400 * kScale, [&] {
    for (std::size_t n : {2u, 3u, 5u, 64u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, kMinParallelWork, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      });
      for (std::size_t i = 0; i < n; ++i) wrong += hits[i].load() != 1;
      ++calls;
    }
  });
  BOOST_TEST(wrong == 0u);
  BOOST_TEST_MESSAGE("parallel_for: " << calls << " calls checked");
}

BOOST_AUTO_TEST_CASE(split_gemms_of_alternating_shapes_match_one_thread) {
  Rng rng(41);
  // (1024, 512) x (512, 64) splits into 4 row blocks, (512, 512) x (512, 64) into 2, and
  // (64, 512) x (512, 1024) into 4 column blocks (ops/detail.cpp's rule).
  std::vector<std::pair<Tensor, Tensor>> cases = {{randn({1024, 512}, rng), randn({512, 64}, rng)},
                                                  {randn({512, 512}, rng), randn({512, 64}, rng)},
                                                  {randn({64, 512}, rng), randn({512, 1024}, rng)}};
  std::vector<std::vector<double>> ref;
  for (auto& [a, b] : cases) ref.push_back(matmul(a, b).to_vector());
  std::size_t calls = 0, wrong = 0;
  with_cycling_thread_counts(100 * kScale, [&] {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      wrong += !same_bits(matmul(cases[c].first, cases[c].second), ref[c]);
      ++calls;
    }
  });
  BOOST_TEST(wrong == 0u);
  BOOST_TEST_MESSAGE("matmul: " << calls << " split calls checked");
}

BOOST_AUTO_TEST_CASE(user_threads_running_ops_at_once) {
  Rng rng(42);
  Tensor a = randn({1024, 256}, rng), b = randn({256, 96}, rng), w = randn({96, 256}, rng);
  Tensor q = randn({2, 64, 64}, rng), k = randn({2, 64, 64}, rng), v = randn({2, 64, 64}, rng);
  AttentionMasks causal;
  causal.is_causal = true;
  auto work = [&] {
    return std::vector<Tensor>{matmul(a, b), linear(a, w), attention(q, k, v, 4, causal), gelu(a), sum(a, {0})};
  };
  std::vector<std::vector<double>> ref;
  for (const Tensor& t : work()) ref.push_back(t.to_vector());
  std::atomic<std::size_t> wrong{0}, calls{0};
  std::atomic<bool> failed_with_exception{false};
  test::SplitAllWork split;  // attention and the column sums split at these sizes too
  set_num_threads(3);
  {
    std::vector<std::thread> users;
    for (int u = 0; u < 3; ++u)
      users.emplace_back([&] {
        try {
          for (int round = 0; round < 40 * kScale; ++round) {
            const auto outs = work();
            for (std::size_t i = 0; i < outs.size(); ++i) wrong += !same_bits(outs[i], ref[i]);
            ++calls;
          }
        } catch (...) {
          failed_with_exception = true;
        }
      });
    for (int round = 0; round < 20 * kScale; ++round) set_num_threads(2 + round % 3);  // while they run
    for (auto& t : users) t.join();
  }
  set_num_threads(1);
  BOOST_TEST(!failed_with_exception.load());
  BOOST_TEST(wrong.load() == 0u);
  BOOST_TEST_MESSAGE("user threads: " << calls.load() << " rounds of 5 ops checked");
}

// A parameter shared by two graphs, each differentiated in its own thread (Hogwild-style): the
// leaf's .grad update is locked, so no contribution is lost (it used to lose ~5-10% of them,
// and could crash).
BOOST_AUTO_TEST_CASE(two_threads_accumulate_into_one_leaf) {
  Tensor w = zeros({64});
  w.set_requires_grad(true);
  const int rounds = 400 * kScale;
  std::atomic<bool> failed_with_exception{false};
  auto train = [&](float c) {
    try {
      const Tensor scale = full({64}, c);
      for (int r = 0; r < rounds; ++r) sum(mul(w, scale)).backward();
    } catch (...) {
      failed_with_exception = true;
    }
  };
  std::thread a(train, 1.0f), b(train, 2.0f);
  a.join();
  b.join();
  BOOST_TEST(!failed_with_exception.load());
  const std::vector<double> g = w.grad().to_vector();  // each round adds 1 or 2: exact in float32
  BOOST_TEST(std::count(g.begin(), g.end(), 3.0 * rounds) == 64);
}

// Two threads differentiating one graph without retain_graph: as in one thread, the graph's
// saved values go with the first backward that runs a node, so the other may throw the
// "second time" GraphError; it never reads freed state (this used to segfault). Whatever
// succeeds gives the right gradient.
BOOST_AUTO_TEST_CASE(two_threads_differentiate_one_graph) {
  Rng rng(43);
  const Tensor x = randn({16, 32}, rng), w0 = mul_scalar(randn({32, 32}, rng), 0.2);
  auto loss_of = [&](const Tensor& w) {  // 60 nodes: long enough for the threads to overlap
    Tensor h = x;
    for (int layer = 0; layer < 30; ++layer) h = tanh(matmul(h, w));
    return sum(h);
  };
  Tensor w = w0.clone();
  w.set_requires_grad(true);
  const std::vector<double> ref = grad({loss_of(w)}, {w})[0].to_vector();
  std::atomic<int> ok{0}, second_time{0}, other{0}, wrong{0};
  for (int round = 0; round < 100 * kScale; ++round) {
    const Tensor loss = loss_of(w);
    std::atomic<int> ready{0};
    auto run = [&] {
      ++ready;
      while (ready.load() < 2) std::this_thread::yield();  // start together
      try {
        wrong += !same_bits(grad({loss}, {w})[0], ref);
        ++ok;
      } catch (const GraphError& e) {
        ++(std::string(e.what()).find("second time") != std::string::npos ? second_time : other);
      } catch (...) {
        ++other;
      }
    };
    std::thread a(run), b(run);
    a.join();
    b.join();
  }
  BOOST_TEST(other.load() == 0);
  BOOST_TEST(wrong.load() == 0);
  BOOST_TEST(ok.load() >= 100 * kScale);  // at least one backward of each round runs
  BOOST_TEST_MESSAGE("one graph, two threads: " << ok.load() << " succeeded, " << second_time.load()
                                                 << " found it freed");
}

BOOST_AUTO_TEST_SUITE_END()
