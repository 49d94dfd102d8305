// parallel_for (coverage, exceptions, nesting) and the promise of framework/runtime.hpp:
// results never depend on the thread count. Every op that splits work, a model's forward and
// backward and an optimizer step are run with 1, 2, 3 and 4 threads on shapes above every
// split threshold, on every CPU path this machine runs, and compared bit for bit.
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/parallel.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/norm.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using xgrad::test::with_threads;

namespace {

// Every value of every tensor, bit patterns included (== on doubles would let -0 == 0 pass).
std::vector<std::uint64_t> bits_of(const std::vector<Tensor>& ts) {
  std::vector<std::uint64_t> all;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    for (double x : t.to_vector()) {
      std::uint64_t u;
      std::memcpy(&u, &x, sizeof u);
      all.push_back(u);
    }
  }
  return all;
}

// Restores the CPU path the suite started with (also when the body throws).
template <class F> void on_each_cpu_path(F&& f) {
  const CpuPath before = cpu_path();
  try {
    for (CpuPath p : supported_cpu_paths()) {
      set_cpu_path(p);
      BOOST_TEST_CONTEXT("cpu path " << cpu_path_name(p)) { f(); }
    }
  } catch (...) {
    set_cpu_path(before);
    throw;
  }
  set_cpu_path(before);
}

// run() with 1 thread, then 2, 3 and 4: every result bit-identical to the first.
template <class Run> void same_bits_for_every_thread_count(const std::string& what, Run run) {
  const auto one = bits_of(run());
  BOOST_TEST_REQUIRE(!one.empty());
  for (int n : {2, 3, 4}) {
    std::vector<std::uint64_t> got;
    with_threads(n, [&] { got = bits_of(run()); });
    BOOST_TEST_CONTEXT(what << ", " << n << " threads vs 1") {
      BOOST_TEST(got.size() == one.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < std::min(got.size(), one.size()); ++i) differ += got[i] != one[i];
      BOOST_TEST(differ == 0u, differ << " of " << one.size() << " values differ");
    }
  }
}

Tensor leaf(const Tensor& t) {
  t.set_requires_grad(true);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(parallel)

BOOST_AUTO_TEST_CASE(every_index_runs_exactly_once) {
  for (int threads : {2, 3, 4, 8}) {
    with_threads(threads, [&] {
      for (std::size_t n : {0, 1, 2, 3, 17, 1000, 4099}) {
        std::vector<std::atomic<int>> hits(n);
        parallel_for(n, kMinParallelWork, [&](std::size_t begin, std::size_t end) {
          for (std::size_t i = begin; i < end; ++i) ++hits[i];
        });
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) wrong += hits[i].load() != 1;
        BOOST_TEST_CONTEXT(threads << " threads, n " << n) { BOOST_TEST(wrong == 0u); }
      }
    });
  }
}

BOOST_AUTO_TEST_CASE(uses_at_most_the_configured_threads) {
  with_threads(3, [] {
    std::mutex mu;
    std::set<std::thread::id> seen;
    for (int rep = 0; rep < 50; ++rep)
      parallel_for(64, kMinParallelWork, [&](std::size_t, std::size_t) {
        std::lock_guard<std::mutex> lk(mu);
        seen.insert(std::this_thread::get_id());
      });
    BOOST_TEST(seen.size() <= 3u);
  });
}

BOOST_AUTO_TEST_CASE(small_work_and_nested_calls_run_inline) {
  with_threads(2, [] {
    detail::set_min_parallel_work(kMinParallelWork);  // the default bound (with_threads lowers it to 1, then restores it)
    const auto caller = std::this_thread::get_id();
    bool inline_small = true;
    for (std::size_t cost : {std::size_t(1), kMinParallelWork / 8 - 1})
      parallel_for(8, cost, [&](std::size_t, std::size_t) { inline_small &= std::this_thread::get_id() == caller; });
    BOOST_TEST(inline_small);
    std::atomic<int> nested_calls{0}, nested_inline{0}, outer_items{0};  // Boost.Test asserts on this thread only
    parallel_for(2, kMinParallelWork, [&](std::size_t b, std::size_t e) {
      outer_items += int(e - b);
      const auto me = std::this_thread::get_id();
      parallel_for(4, kMinParallelWork, [&](std::size_t b2, std::size_t e2) {
        ++nested_calls;
        if (b2 == 0 && e2 == 4 && std::this_thread::get_id() == me) ++nested_inline;
      });
    });
    BOOST_TEST(outer_items.load() == 2);
    BOOST_TEST(nested_calls.load() == nested_inline.load());  // one inline call per outer range
    BOOST_TEST(nested_calls.load() >= 1);
  });
}

BOOST_AUTO_TEST_CASE(an_exception_in_any_range_reaches_the_caller) {
  with_threads(2, [] {
    for (std::size_t bad : {0, 1, 7}) {
      BOOST_CHECK_THROW(parallel_for(8, kMinParallelWork,
                                     [&](std::size_t b, std::size_t e) {
                                       if (b <= bad && bad < e) throw std::runtime_error("range failed");
                                     }),
                        std::runtime_error);
    }
    std::atomic<int> after{0};  // the pool still works
    parallel_for(100, kMinParallelWork, [&](std::size_t b, std::size_t e) { after += int(e - b); });
    BOOST_TEST(after.load() == 100);
  });
}

BOOST_AUTO_TEST_CASE(thread_count_settings) {
  BOOST_TEST(num_threads() == 1);  // the suite's setting (tests/main.cpp)
  BOOST_CHECK_THROW(set_num_threads(0), ValueError);
  BOOST_CHECK_THROW(set_num_threads(-3), ValueError);
  BOOST_TEST(num_threads() == 1);
}

BOOST_AUTO_TEST_CASE(cpu_paths_can_be_forced_and_bad_ones_are_errors) {
  const auto paths = supported_cpu_paths();
  BOOST_TEST_REQUIRE(!paths.empty());
  BOOST_TEST((paths.front() == CpuPath::Baseline));
  const CpuPath before = cpu_path();
  for (CpuPath p : {CpuPath::Baseline, CpuPath::Avx2, CpuPath::Avx512}) {
    const bool runs = std::find(paths.begin(), paths.end(), p) != paths.end();
    if (runs) {
      set_cpu_path(p);
      BOOST_TEST((cpu_path() == p));
    } else {
      BOOST_CHECK_THROW(set_cpu_path(p), ValueError);
    }
  }
  set_cpu_path(before);
  BOOST_TEST(std::string(cpu_path_name(CpuPath::Avx2)) == "avx2");
}

// OpenBLAS's generic fallback kernels (a CPU it does not know, e.g. Prescott on a Xeon of
// family 6 model 207) are named in the summary with the family to pin; never when the
// environment pins one (as scripts/test-matrix.sh does) or OpenBLAS chose a vector family.
BOOST_AUTO_TEST_CASE(runtime_summary_names_openblas_generic_kernels) {
  const RuntimeInfo info = runtime_info();
  const std::string summary = runtime_summary();
  const auto paths = supported_cpu_paths();
  BOOST_TEST(summary.find("openblas " + info.blas_core) != std::string::npos);
  const bool pinned = std::getenv("OPENBLAS_CORETYPE") != nullptr;
  for (const char* vector_family : {"Sandybridge", "Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "not OpenBLAS"})
    if (info.blas_core == vector_family) BOOST_TEST(info.blas_coretype_hint.empty());
  if (pinned || paths.back() == CpuPath::Baseline) BOOST_TEST(info.blas_coretype_hint.empty());
  if (!pinned && (info.blas_core == "Prescott" || info.blas_core == "Nehalem" || info.blas_core == "Core2") &&
      paths.back() != CpuPath::Baseline)
    BOOST_TEST(info.blas_coretype_hint == (paths.back() == CpuPath::Avx512 ? "SkylakeX" : "Haswell"));
  const std::size_t at = summary.find("OpenBLAS does not know this CPU");
  BOOST_TEST((at != std::string::npos) == !info.blas_coretype_hint.empty());
  if (!info.blas_coretype_hint.empty())
    BOOST_TEST(summary.find("OPENBLAS_CORETYPE=" + info.blas_coretype_hint + " picks faster ones") != std::string::npos);
}

// The paths are really different code: float32 GELU over many inputs differs in some last
// bits between a path without FMA and one with it, and each stays within fastmath's bound.
BOOST_AUTO_TEST_CASE(cpu_paths_run_their_own_kernels) {
  const auto paths = supported_cpu_paths();
  if (paths.size() < 2) return;  // one path on this CPU: nothing to compare
  Rng rng(31);
  Tensor x = mul_scalar(randn({4096}, rng), 3.0);
  std::vector<std::vector<double>> out;
  const CpuPath before = cpu_path();
  for (CpuPath p : paths) {
    set_cpu_path(p);
    out.push_back(gelu(x).to_vector());
  }
  set_cpu_path(before);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < out[0].size(); ++i) differ += out[0][i] != out.back()[i];
  BOOST_TEST(differ > 0u, "baseline and " << cpu_path_name(paths.back()) << " GELU gave identical bits");
}

BOOST_AUTO_TEST_CASE(split_gemms_are_bit_identical_for_any_thread_count) {
  Rng rng(21);
  // (n, k, m): tall (split by rows into 4 and 2 blocks) and wide (split by columns), above the
  // split thresholds of ops/detail.cpp, with block lengths that do not divide evenly; 1100 x 300
  // x 256: K over 256 (xgrad's tiles on the AVX2 path, B in column panels; BLAS elsewhere).
  for (auto [n, k, m] : {std::array<std::size_t, 3>{1100, 128, 256}, std::array<std::size_t, 3>{1500, 100, 120},
                         std::array<std::size_t, 3>{60, 80, 4000}, std::array<std::size_t, 3>{520, 64, 520},
                         std::array<std::size_t, 3>{1100, 300, 256}}) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      Tensor a = leaf(randn(ta ? Shape{k, n} : Shape{n, k}, rng)), b = leaf(randn(tb ? Shape{m, k} : Shape{k, m}, rng));
      Tensor g = randn({n, m}, rng);
      same_bits_for_every_thread_count("matmul flags " + std::to_string(flags) + " n " + std::to_string(n), [&] {
        Tensor y = matmul(a, b, ta, tb);
        auto grads = grad({y}, {a, b}, {g});
        return std::vector<Tensor>{y, grads[0], grads[1]};
      });
    }
  }
}

BOOST_AUTO_TEST_CASE(elementwise_linear_reductions_norm_softmax_are_bit_identical) {
  Rng rng(22);
  on_each_cpu_path([&] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor x = leaf(randn({700, 300}, rng, dt)), y = leaf(randn({700, 300}, rng, dt));
      Tensor w = leaf(randn({900, 300}, rng, dt)), b = leaf(randn({900}, rng, dt));
      Tensor lw = leaf(randn({300}, rng, dt)), lb = leaf(randn({300}, rng, dt));
      same_bits_for_every_thread_count(std::string("ops ") + (dt == DType::Float32 ? "f32" : "f64"), [&] {
        std::vector<Tensor> outs{mul(x, y), add(x, y), sum(x, {0}), sum(reshape(x, {7, 100, 300}), {0, 1}),
                                 linear(x, w, b), gelu(x), layer_norm(x, lw, lb), softmax(x, -1),
                                 log_softmax(y, 0), mean(x, {1})};
        Tensor loss = Tensor();
        for (const Tensor& o : outs) {
          Tensor s = sum(mul(o, o));
          loss = loss.defined() ? add(loss, s) : s;
        }
        auto grads = grad({loss}, {x, y, w, b, lw, lb});
        outs.insert(outs.end(), grads.begin(), grads.end());
        return outs;
      });
    }
  });
}

BOOST_AUTO_TEST_CASE(attention_every_mask_kind_is_bit_identical) {
  Rng rng(23);
  on_each_cpu_path([&] {
    const std::size_t B = 2, T = 96, S = 96, H = 4, D = 16;
    Tensor q = leaf(randn({B, T, H * D}, rng)), k = leaf(randn({B, S, H * D}, rng)), v = leaf(randn({B, S, H * D}, rng));
    Tensor g = randn({B, T, H * D}, rng);
    std::vector<bool> pad(B * S, false);
    for (std::size_t s = 80; s < S; ++s) pad[S + s] = true;
    AttentionMasks causal, padded, additive;
    causal.is_causal = true;
    padded.key_padding_mask = bool_tensor(pad, {B, S});
    padded.mask = causal_mask(T, S);
    additive.float_mask = randn({T, S}, rng);
    for (const AttentionMasks* m : {&causal, &padded, &additive}) {
      same_bits_for_every_thread_count("attention", [&] {
        Tensor out = attention(q, k, v, H, *m);
        auto grads = grad({out}, {q, k, v}, {g});
        return std::vector<Tensor>{out, grads[0], grads[1], grads[2]};
      });
    }
    // 150 queries (three row blocks, the last partial), 130 keys, a (B*H, T, S) mask.
    const std::size_t T2 = 150, S2 = 130;
    Tensor q2 = leaf(randn({B, T2, H * D}, rng)), k2 = leaf(randn({B, S2, H * D}, rng)),
           v2 = leaf(randn({B, S2, H * D}, rng));
    Tensor g2 = randn({B, T2, H * D}, rng);
    std::vector<bool> per_head(B * H * T2 * S2);
    for (std::size_t i = 0; i < per_head.size(); ++i) per_head[i] = (i * 13 + 5) % 7 < 2;
    AttentionMasks heads;
    heads.mask = bool_tensor(per_head, {B * H, T2, S2});
    for (bool causal_too : {false, true}) {
      heads.is_causal = causal_too;
      same_bits_for_every_thread_count("attention T150 S130 (B*H, T, S) mask", [&] {
        Tensor out = attention(q2, k2, v2, H, heads);
        auto grads = grad({out}, {q2, k2, v2}, {g2});
        return std::vector<Tensor>{out, grads[0], grads[1], grads[2]};
      });
    }
  });
}

BOOST_AUTO_TEST_CASE(model_forward_backward_and_adam_step_are_bit_identical) {
  on_each_cpu_path([&] {
    TransformerConfig cfg;
    cfg.vocab_size = 50;
    cfg.max_len = 128;
    cfg.embed_dim = 128;
    cfg.num_heads = 4;
    cfg.ff_hidden = 512;
    cfg.num_layers = 2;
    cfg.seed = 3;
    Rng rng(24);
    std::vector<std::int64_t> tok(8 * 128);
    for (auto& t : tok) t = std::int64_t(rng() % 50);
    Tensor tokens = index_tensor(tok, {8, 128});
    same_bits_for_every_thread_count("decoder step", [&] {
      TransformerDecoder model(cfg);  // same seed: same initial parameters every run
      AdamW opt(model.named_parameters(), 1e-3);
      for (int step = 0; step < 2; ++step) {
        opt.zero_grad();
        Tensor logits = model.forward(tokens);
        cross_entropy(logits, tokens).backward();
        opt.step();
      }
      std::vector<Tensor> out = model.parameters();
      for (const Tensor& p : model.parameters()) out.push_back(p.grad());
      return out;
    });
  });
}

BOOST_AUTO_TEST_SUITE_END()
