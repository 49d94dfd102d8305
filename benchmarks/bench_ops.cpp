// bench_ops: per-op-family Google Benchmark cases, forward and forward+backward, float32.
//
// Names: <op>/<size>/<fwd|fwd_bwd>. Two sizes, the shapes of bench_mha's small and large
// attention configs:
//   S: B 8, T 32, E 64, H 4    (activations (8,32,64) = 16 Ki floats, scores (8,4,32,32) = 32 Ki)
//   L: B 4, T 512, E 512, H 8  (activations (4,512,512) = 1 Mi floats, scores (4,8,512,512) = 8 Mi)
// fwd:      inputs do not require grad (no graph is recorded): the op's compute alone.
// fwd_bwd:  the differentiable inputs require grad; y = op(...); y.backward(g) with a random
//           upstream g of y's shape (scalar outputs: backward()); .grad is dropped each iteration.
// Also gelu/512x128/* and gelu/4096x2048/*: GELU on fixed 2-D shapes.
// Counter items_per_second counts the elements of the op's main input.
// Threads: XGRAD_THREADS=<n> (default 1). Run e.g.
//   build-bench/benchmarks/bench_ops --benchmark_filter='softmax'
#include <cstdlib>
#include <functional>
#include <random>
#include <iostream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include "xgrad/xgrad.hpp"

namespace {

using xgrad::Shape;
using xgrad::Tensor;

struct Dims {
  const char* name;
  std::size_t B, T, E, H, vocab_emb, vocab_ce;
  std::size_t D() const { return E / H; }
};

const Dims kSizes[] = {{"S", 8, 32, 64, 4, 11, 11}, {"L", 4, 512, 512, 8, 8192, 1024}};

struct Case {
  std::vector<Tensor> inputs;  // all arguments (float, bool or int64)
  std::vector<bool> diff;      // which inputs get requires_grad in fwd_bwd
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};
using Maker = std::function<Case(const Dims&, xgrad::Rng&)>;

Tensor randn(const Shape& s, xgrad::Rng& rng) { return xgrad::randn(s, rng); }

std::vector<std::pair<std::string, Maker>> cases() {
  using namespace xgrad;
  std::vector<std::pair<std::string, Maker>> c;
  auto add = [&](const std::string& name, Maker m) { c.emplace_back(name, std::move(m)); };
  // elementwise with broadcasting
  add("add_bcast", [](const Dims& d, Rng& r) {  // (B,T,E) + (E): bias add
    return Case{{randn({d.B, d.T, d.E}, r), randn({d.E}, r)}, {true, true},
                [](const auto& in) { return xgrad::add(in[0], in[1]); }};
  });
  add("mul_bcast", [](const Dims& d, Rng& r) {  // (B,T,E) * (B,T,1): row scaling
    return Case{{randn({d.B, d.T, d.E}, r), randn({d.B, d.T, 1}, r)}, {true, true},
                [](const auto& in) { return xgrad::mul(in[0], in[1]); }};
  });
  // unary
  add("gelu", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.T, d.E}, r)}, {true}, [](const auto& in) { return xgrad::gelu(in[0]); }};
  });
  add("exp", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.T, d.E}, r)}, {true}, [](const auto& in) { return xgrad::exp(in[0]); }};
  });
  // reductions
  add("sum_lastdim", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.T, d.E}, r)}, {true},
                [](const auto& in) { return xgrad::sum(in[0], {-1}, true); }};
  });
  add("sum_leading", [](const Dims& d, Rng& r) {  // bias-gradient shape: over (B, T)
    return Case{{randn({d.B, d.T, d.E}, r)}, {true},
                [](const auto& in) { return xgrad::sum(in[0], {0, 1}); }};
  });
  add("mean_all", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.T, d.E}, r)}, {true}, [](const auto& in) { return xgrad::mean(in[0]); }};
  });
  add("mean_lastdim", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.T, d.E}, r)}, {true},
                [](const auto& in) { return xgrad::mean(in[0], {-1}, true); }};
  });
  add("max_lastdim", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.T, d.E}, r)}, {true}, [](const auto& in) { return xgrad::max(in[0], -1); }};
  });
  // normalisation: layer_norm over E with weight and bias (E), as in every TransformerBlock
  add("layer_norm", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.T, d.E}, r), randn({d.E}, r), randn({d.E}, r)}, {true, true, true},
                [](const auto& in) { return xgrad::layer_norm(in[0], in[1], in[2], 1e-5); }};
  });
  // shape ops
  add("reshape", [](const Dims& d, Rng& r) {  // (B,T,E) -> (B,T,H,D)
    const Shape to{d.B, d.T, d.H, d.D()};
    return Case{{randn({d.B, d.T, d.E}, r)}, {true}, [to](const auto& in) { return xgrad::reshape(in[0], to); }};
  });
  add("permute", [](const Dims& d, Rng& r) {  // (B,T,H,D) -> (B,H,T,D): split_heads
    return Case{{randn({d.B, d.T, d.H, d.D()}, r)}, {true},
                [](const auto& in) { return xgrad::permute(in[0], {0, 2, 1, 3}); }};
  });
  add("narrow", [](const Dims& d, Rng& r) {  // (B,T,3E) -> middle third (B,T,E): chunk of qkv
    const std::size_t E = d.E;
    return Case{{randn({d.B, d.T, 3 * d.E}, r)}, {true},
                [E](const auto& in) { return xgrad::narrow(in[0], -1, E, E); }};
  });
  add("concat", [](const Dims& d, Rng& r) {  // 3 x (B,T,E) -> (B,T,3E)
    return Case{{randn({d.B, d.T, d.E}, r), randn({d.B, d.T, d.E}, r), randn({d.B, d.T, d.E}, r)},
                {true, true, true},
                [](const auto& in) { return xgrad::concat({in[0], in[1], in[2]}, -1); }};
  });
  // matmul family
  add("matmul_batched_qkT", [](const Dims& d, Rng& r) {  // (B,H,T,D) x (B,H,T,D)^T -> (B,H,T,T)
    return Case{{randn({d.B, d.H, d.T, d.D()}, r), randn({d.B, d.H, d.T, d.D()}, r)}, {true, true},
                [](const auto& in) { return xgrad::matmul(in[0], in[1], false, true); }};
  });
  add("matmul_batched_pv", [](const Dims& d, Rng& r) {  // (B,H,T,T) x (B,H,T,D) -> (B,H,T,D)
    return Case{{randn({d.B, d.H, d.T, d.T}, r), randn({d.B, d.H, d.T, d.D()}, r)}, {true, true},
                [](const auto& in) { return xgrad::matmul(in[0], in[1]); }};
  });
  add("linear", [](const Dims& d, Rng& r) {  // (B,T,E) W (3E,E) + b (3E): the in-projection
    return Case{{randn({d.B, d.T, d.E}, r), randn({3 * d.E, d.E}, r), randn({3 * d.E}, r)},
                {true, true, true}, [](const auto& in) { return xgrad::linear(in[0], in[1], in[2]); }};
  });
  // softmax family and masks, on scores (B,H,T,T)
  add("softmax", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.H, d.T, d.T}, r)}, {true},
                [](const auto& in) { return xgrad::softmax(in[0], -1); }};
  });
  add("masked_softmax_causal", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.H, d.T, d.T}, r), causal_mask(d.T)}, {true, false},
                [](const auto& in) { return xgrad::masked_softmax(in[0], in[1], -1); }};
  });
  // fused attention (ops/attention.cpp): q, k, v (B, T, E), H heads, causal, as in MHA
  add("attention_causal", [](const Dims& d, Rng& r) {
    const std::size_t H = d.H;
    return Case{{randn({d.B, d.T, d.E}, r), randn({d.B, d.T, d.E}, r), randn({d.B, d.T, d.E}, r)},
                {true, true, true}, [H](const auto& in) {
                  xgrad::AttentionMasks m;
                  m.is_causal = true;
                  return xgrad::attention(in[0], in[1], in[2], H, m);
                }};
  });
  add("masked_fill_causal", [](const Dims& d, Rng& r) {
    return Case{{randn({d.B, d.H, d.T, d.T}, r), causal_mask(d.T)}, {true, false},
                [](const auto& in) { return xgrad::masked_fill(in[0], in[1], -1e9); }};
  });
  // index
  add("embedding", [](const Dims& d, Rng& r) {  // W (V,E)[(B,T)] -> (B,T,E)
    std::vector<std::int64_t> idx(d.B * d.T);
    for (auto& i : idx) i = r.uniform_int(0, std::int64_t(d.vocab_emb) - 1);
    return Case{{randn({d.vocab_emb, d.E}, r), index_tensor(idx, {d.B, d.T})}, {true, false},
                [](const auto& in) { return xgrad::embedding(in[0], in[1]); }};
  });
  // loss
  add("cross_entropy", [](const Dims& d, Rng& r) {  // logits (B,T,V), ~1/8 targets ignored
    std::vector<std::int64_t> t(d.B * d.T);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = i % 8 == 7 ? -100 : r.uniform_int(0, std::int64_t(d.vocab_ce) - 1);
    return Case{{randn({d.B, d.T, d.vocab_ce}, r), index_tensor(t, {d.B, d.T})}, {true, false},
                [](const auto& in) { return xgrad::cross_entropy(in[0], in[1], -100); }};
  });
  return c;
}

void run_fwd(benchmark::State& state, const Maker& make, const Dims& d) {
  xgrad::Rng rng(0);
  Case c = make(d, rng);
  xgrad::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = c.fn(c.inputs);
    benchmark::DoNotOptimize(y.impl());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(std::int64_t(state.iterations()) * std::int64_t(c.inputs[0].numel()));
}

void run_fwd_bwd(benchmark::State& state, const Maker& make, const Dims& d) {
  xgrad::Rng rng(0);
  Case c = make(d, rng);
  std::vector<Tensor> leaves;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    if (c.diff[i]) leaves.push_back(c.inputs[i].set_requires_grad());
  Tensor g;
  {
    Tensor y0 = c.fn(c.inputs);
    if (y0.dim() > 0) g = xgrad::randn(y0.shape(), rng);
  }
  for (auto _ : state) {
    for (const Tensor& l : leaves) l.zero_grad();
    Tensor y = c.fn(c.inputs);
    y.backward(g);
    for (const Tensor& l : leaves) benchmark::DoNotOptimize(l.grad().impl());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(std::int64_t(state.iterations()) * std::int64_t(c.inputs[0].numel()));
}

}  // namespace

int main(int argc, char** argv) {
  set_threads_from_env("bench_ops");
  for (const auto& [name, make] : cases())
    for (const Dims& d : kSizes) {
      const std::string base = name + "/" + d.name + "/";
      benchmark::RegisterBenchmark((base + "fwd").c_str(), run_fwd, make, d)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((base + "fwd_bwd").c_str(), run_fwd_bwd, make, d)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  // GELU on 2-D float32 activations of fixed shapes (an MLP hidden layer, small and large).
  const std::pair<const char*, Shape> kGeluShapes[] = {{"512x128", {512, 128}}, {"4096x2048", {4096, 2048}}};
  for (const auto& [label, shape] : kGeluShapes) {
    Maker make = [s = shape](const Dims&, xgrad::Rng& r) {
      return Case{{xgrad::randn(s, r)}, {true}, [](const auto& in) { return xgrad::gelu(in[0]); }};
    };
    const std::string base = std::string("gelu/") + label + "/";
    benchmark::RegisterBenchmark((base + "fwd").c_str(), run_fwd, make, kSizes[0])
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((base + "fwd_bwd").c_str(), run_fwd_bwd, make, kSizes[0])
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return run_benchmarks(argc, argv);
}
