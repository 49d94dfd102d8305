// The functional API's costs against the passes they are made of, on the `reverse` example's
// default model without skip_padding (TransformerEncoder E 64, H 4, 2 layers, ff 128; ~70k parameters; float32;
// batch of 64 sequences of length <= 16; benchmarks/reverse_step.hpp):
//   BM_forward              loss forward, graph recorded (the unit of jvp's cost)
//   BM_forward_backward     forward + one batched backward (the unit of per-sample cost)
//   BM_vjp                  vjp of the logits w.r.t. the parameters (forward + backward)
//   BM_jvp                  jvp of the logits along a random parameter tangent: forward,
//                           backward with create_graph, backward of that backward
//   BM_vhp / BM_hvp         Hessian-vector products of the loss (2 and 3 passes after the forward)
//   BM_hessian_operator     one product on a retained gradient graph (what Lanczos pays per step)
//   BM_per_sample_auto      per_sample_gradients, method Auto (all 64 examples)
//   BM_per_sample_loop      per_sample_gradients, method Loop (64 backwards)
// Ratios: divide the times of one run (bench_functional --benchmark_repetitions=5).
#include "bench_common.hpp"
#include "reverse_step.hpp"

namespace {

using namespace xgrad;

struct Setup {
  // skip_padding off: per_sample_gradients' closed forms need the batch axis, which the
  // packed rows of skip_padding do not have (TransformerConfig::skip_padding).
  TransformerEncoder model{xgrad_bench::reverse_config(false)};
  xgrad_bench::ReverseBatch batch;
  Tensors tangents;
  Setup() {
    Rng rng(7);
    batch = xgrad_bench::make_reverse_batch(rng, 64);
    for (const auto& p : model.parameters()) tangents.push_back(randn(p.shape(), rng));
  }
  Tensor logits() { return model.forward(batch.tokens, batch.padding); }
  Tensor loss() { return cross_entropy(logits(), batch.targets); }
  Tensor per_example() { return cross_entropy_per_example(logits(), batch.targets); }
  TensorFn logits_fn() { return parameter_function(model, [this] { return logits(); }); }
  TensorFn loss_fn() { return parameter_function(model, [this] { return loss(); }); }
};

Setup& setup() {
  static Setup s;
  return s;
}

void BM_forward(benchmark::State& state) {
  auto& s = setup();
  for (auto _ : state) benchmark::DoNotOptimize(s.loss());
}
void BM_forward_backward(benchmark::State& state) {
  auto& s = setup();
  const Tensors params = s.model.parameters();
  for (auto _ : state) benchmark::DoNotOptimize(grad({mean(s.per_example())}, params));
}
void BM_vjp(benchmark::State& state) {
  auto& s = setup();
  Rng rng(3);
  const Tensor u = randn(s.logits().shape(), rng);
  const TensorFn f = s.logits_fn();
  for (auto _ : state) benchmark::DoNotOptimize(vjp(f, s.model.parameters(), u));
}
void BM_jvp(benchmark::State& state) {
  auto& s = setup();
  const TensorFn f = s.logits_fn();
  for (auto _ : state) benchmark::DoNotOptimize(jvp(f, s.model.parameters(), s.tangents));
}
void BM_vhp(benchmark::State& state) {
  auto& s = setup();
  const TensorFn f = s.loss_fn();
  for (auto _ : state) benchmark::DoNotOptimize(vhp(f, s.model.parameters(), s.tangents));
}
void BM_hvp(benchmark::State& state) {
  auto& s = setup();
  const TensorFn f = s.loss_fn();
  for (auto _ : state) benchmark::DoNotOptimize(hvp(f, s.model.parameters(), s.tangents));
}
void BM_hessian_operator(benchmark::State& state) {
  auto& s = setup();
  const HessianOperator H(s.loss_fn(), s.model.parameters());
  for (auto _ : state) benchmark::DoNotOptimize(H(s.tangents));
}
void BM_per_sample(benchmark::State& state, PerSampleMethod method) {
  auto& s = setup();
  PerSampleOptions o;
  o.method = method;
  for (auto _ : state) benchmark::DoNotOptimize(per_sample_gradients(s.model, [&] { return s.per_example(); }, o));
}

BENCHMARK(BM_forward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_forward_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_vjp)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_jvp)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_vhp)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hvp)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hessian_operator)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_per_sample, auto, PerSampleMethod::Auto)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_per_sample, loop, PerSampleMethod::Loop)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  set_threads_from_env("bench_functional");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("model", "reverse TransformerEncoder E64 H4 L2 ff128, batch 64 x 16, float32");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
