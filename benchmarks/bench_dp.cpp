// bench_dp — the `reverse` example's training step, data-parallel: throughput and where the
// time goes, for benchmarks/dp_scaling.sh. Run it as `./bench_dp` (one process) or under
// `mpirun -np N`; one thread per rank is what dp_scaling.sh measures (XGRAD_NUM_THREADS=1).
//
// The step is examples/reverse.cpp's at its defaults (TransformerEncoder E 64, H 4, ff 128,
// 2 layers; AdamW lr 3e-3, betas (0.9, 0.98), eps 1e-9, weight decay 0.01; clip at 1.0) on a
// per-rank batch of --batch sequences (the global batch is N times that: weak scaling, "the
// same per-rank batch"), with the batches generated before timing. Prints one line of
// key=value pairs on rank 0:
//   ranks, batch_per_rank, samples_per_s (global), step_ms (median over the timed steps),
//   wait_ms (median time backward spends after its last node waiting for the reductions),
//   wait_fraction (wait_ms / step_ms), callback_ms (copying gradients into buckets and starting
//   messages, inside backward), skew_ms (--split-wait: waiting for the slowest rank to finish
//   its backward, measured by a barrier before the wrapper's wait, which is then communication
//   alone), buckets, bytes_per_step (what this rank sends per step),
//   zero_state_bytes (optimizer state per rank: max over ranks) and full_state_bytes.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/distributed/all.hpp"
#include "xgrad/xgrad.hpp"
#include "reverse_step.hpp"

using namespace xgrad;
namespace dist = xgrad::distributed;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --split-wait: registered before the wrapper, so its backward_finished runs first: a barrier
// there measures how long this rank waits for the slowest rank to finish its backward (skew:
// unequal cores, other processes), and the wrapper's own wait that follows is communication
// alone (the reductions still in flight once every rank is there).
struct SkewProbe : BackwardObserver {
  double seconds = 0;
  void leaf_grad_ready(const Tensor&) override {}
  void backward_finished() override {
    const auto t0 = std::chrono::steady_clock::now();
    dist::barrier();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

int usage() {
  std::cerr << "usage: bench_dp [--steps N] [--warmup N] [--batch B] [--bucket-kb K] [--no-overlap] [--zero] [--split-wait]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Environment env(argc, argv);
  long steps = 100, warmup = 10;
  std::size_t batch = 64, bucket_kb = 1024;
  bool overlap = true, zero = false, split = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> long {
      if (i + 1 >= argc) std::exit(usage());
      const long v = std::atol(argv[++i]);
      if (v < 1) std::exit(usage());
      return v;
    };
    if (a == "--steps") steps = value();
    else if (a == "--warmup") warmup = value();
    else if (a == "--batch") batch = std::size_t(value());
    else if (a == "--bucket-kb") bucket_kb = std::size_t(value());
    else if (a == "--no-overlap") overlap = false;
    else if (a == "--zero") zero = true;
    else if (a == "--split-wait") split = true;
    else return usage();
  }
  tune_allocator();
  TransformerEncoder model(xgrad_bench::reverse_config());
  const AdamWOptions adamw = AdamWOptions(3e-3).betas(0.9, 0.98).eps(1e-9).weight_decay(0.01);
  auto probe = std::make_shared<SkewProbe>();
  if (split) add_backward_observer(probe);
  dist::DistributedDataParallel ddp(model, dist::DDPOptions().bucket_bytes(bucket_kb * 1024).overlap(overlap));
  std::unique_ptr<Optimizer> opt;
  if (zero)
    opt = std::make_unique<dist::ZeroOptimizer>(
        ddp, [&](const NamedTensors& p) { return std::make_unique<AdamW>(p, adamw); });
  else
    opt = std::make_unique<AdamW>(model.named_parameters(), adamw);
  auto* zero_opt = dynamic_cast<dist::ZeroOptimizer*>(opt.get());

  Rng rng(12345 + std::uint64_t(dist::rank()));
  std::vector<xgrad_bench::ReverseBatch> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(xgrad_bench::make_reverse_batch(rng, batch));

  using clock = std::chrono::steady_clock;
  std::vector<double> step_ms, wait_ms, callback_ms, skew_ms;
  dist::barrier();
  for (long s = 0; s < warmup + steps; ++s) {
    if (s == warmup) {
      dist::barrier();
      step_ms.clear(), wait_ms.clear(), callback_ms.clear(), skew_ms.clear();
    }
    const auto start = clock::now();
    const double wait0 = ddp.stats().wait_seconds, cb0 = ddp.stats().callback_seconds, skew0 = probe->seconds;
    const xgrad_bench::ReverseBatch& b = batches[std::size_t(s) % batches.size()];
    opt->zero_grad();
    Tensor loss = cross_entropy(model.forward(b.tokens, b.padding), b.targets);
    loss.backward();
    if (zero_opt) zero_opt->clip_grad_norm(1.0);
    else clip_grad_norm(model.parameters(), 1.0);
    opt->step();
    step_ms.push_back(1e3 * std::chrono::duration<double>(clock::now() - start).count());
    wait_ms.push_back(1e3 * (ddp.stats().wait_seconds - wait0));
    callback_ms.push_back(1e3 * (ddp.stats().callback_seconds - cb0));
    skew_ms.push_back(1e3 * (probe->seconds - skew0));
  }
  if (split) remove_backward_observer(probe.get());
  // The slowest rank sets the pace: report the maximum over the ranks of each median.
  auto slowest = [](double v) {
    Tensor t = scalar(v, DType::Float64);
    dist::all_reduce(t, dist::ReduceOp::Max);
    return t.item();
  };
  const double step = slowest(median(step_ms)), wait = slowest(median(wait_ms)), cb = slowest(median(callback_ms));
  const double skew = slowest(median(skew_ms));
  std::size_t full = 0;
  for (const auto& [n, p] : model.named_parameters()) full += 2 * p.nbytes() + 8;
  const double state = slowest(zero_opt ? double(zero_opt->local_state_bytes()) : double(full));
  // Gradient reduction (ddp) plus, with ZeRO, the parameter all-gather: (N-1)/N of the parameters.
  std::size_t param_bytes = 0;
  for (const auto& [n, p] : model.named_parameters()) param_bytes += p.nbytes();
  const std::size_t n = std::size_t(dist::world_size());
  const std::size_t bytes = ddp.stats().bytes_per_sync + (zero_opt ? param_bytes * (n - 1) / n : 0);
  if (dist::is_root())
    std::cout << "ranks=" << dist::world_size() << " batch_per_rank=" << batch << " bucket_kb=" << bucket_kb
              << " overlap=" << (overlap ? 1 : 0) << " zero=" << (zero ? 1 : 0)
              << " samples_per_s=" << 1e3 * double(batch) * dist::world_size() / step << " step_ms=" << step
              << " wait_ms=" << wait << " wait_fraction=" << wait / step << " callback_ms=" << cb
              << " skew_ms=" << (split ? std::to_string(skew) : std::string("na"))
              << " buckets=" << ddp.stats().buckets << " bytes_per_step=" << bytes
              << " zero_state_bytes=" << std::size_t(state) << " full_state_bytes=" << full
              << " parameters=" << model.parameter_count() << "\n";
  return 0;
}
