// Soak: train a small Transformer encoder for many steps and check that memory stays flat.
//
// Task: reverse random digit sequences of length T = 12 (vocab 10). Model: TransformerEncoder
// E = 32, 2 heads, 2 layers, FF 64; AdamW, gradient clipping, batch 16.
//
// Checks, every step: the graph of the step is freed when the step ends (weak pointers to the
// loss's and the logits' grad_fn and to the logits' storage have expired) and no parameter
// gradient holds a graph. Every --rss-every steps VmRSS is read from /proc/self/status; the
// run fails when RSS at the end exceeds RSS after warm-up (--warmup steps) by more than
// --max-growth percent (default 1%).
//
// Usage: soak [--steps N] [--warmup N] [--rss-every N] [--max-growth PCT] [--seed S]
// Exit 0 = pass, 1 = fail, 2 = bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"

using namespace xgrad;

// Under AddressSanitizer freed memory sits in a quarantine of up to 256 MB before reuse, so
// RSS would measure the quarantine filling up (slower the fewer bytes a step frees), not
// xgrad. A small quarantine keeps use-after-free detection and makes RSS meaningful. (An
// ASAN_OPTIONS quarantine_size_mb in the environment still takes precedence.)
extern "C" const char* __asan_default_options() { return "quarantine_size_mb=8"; }

namespace {

long vm_kb(const char* key) {  // VmRSS / VmHWM in kB, -1 if unavailable
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::stol(line.substr(k.size()));
  return -1;
}

struct Batch {
  Tensor tokens, targets;
};

Batch make_batch(std::uint64_t seed, std::size_t B, std::size_t T) {
  Rng rng(seed);
  std::vector<std::int64_t> x(B * T), y(B * T);
  for (std::size_t i = 0; i < B; ++i) {
    for (std::size_t t = 0; t < T; ++t) x[i * T + t] = rng.uniform_int(0, 9);
    for (std::size_t t = 0; t < T; ++t) y[i * T + t] = x[i * T + T - 1 - t];
  }
  return {index_tensor(x, {B, T}), index_tensor(y, {B, T})};
}

bool parse_long(const char* s, long& out) {
  try {
    std::size_t used = 0;
    out = std::stol(s, &used);
    return used == std::string(s).size();
  } catch (...) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 10000, warmup = 500, rss_every = 100, seed = 0;
  double max_growth = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool ok = i + 1 < argc;
    if (ok && a == "--steps") ok = parse_long(argv[++i], steps) && steps > 0;
    else if (ok && a == "--warmup") ok = parse_long(argv[++i], warmup) && warmup >= 0;
    else if (ok && a == "--rss-every") ok = parse_long(argv[++i], rss_every) && rss_every > 0;
    else if (ok && a == "--seed") ok = parse_long(argv[++i], seed) && seed >= 0;
    else if (ok && a == "--max-growth") {
      try {
        max_growth = std::stod(argv[++i]);
      } catch (...) {
        ok = false;
      }
    } else ok = false;
    if (!ok) {
      std::cerr << "soak: bad argument '" << a << "' (usage: soak [--steps N] [--warmup N] [--rss-every N] "
                   "[--max-growth PCT] [--seed S])\n";
      return 2;
    }
  }
  if (warmup >= steps) {
    std::cerr << "soak: --warmup " << warmup << " must be smaller than --steps " << steps << "\n";
    return 2;
  }

  set_num_threads(1);
  const std::size_t B = 16, T = 12;
  TransformerConfig cfg;
  cfg.vocab_size = 10, cfg.max_len = T, cfg.embed_dim = 32, cfg.num_heads = 2, cfg.ff_hidden = 64;
  cfg.num_layers = 2, cfg.dropout = 0.0, cfg.seed = std::uint64_t(seed);
  TransformerEncoder model(cfg);
  AdamW opt(model.named_parameters(), 1e-3);

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const long rss_start = vm_kb("VmRSS");
  long rss_warm = -1, rss_end = -1, rss_min = -1, rss_max = -1;
  std::vector<std::pair<long, long>> samples;  // (step, kB)
  long graph_leaks = 0, grad_graphs = 0;
  double first_loss = 0, last_loss = 0, running = 0;

  for (long step = 1; step <= steps; ++step) {
    std::weak_ptr<Node> loss_node, logits_node;
    std::weak_ptr<TensorImpl> logits_value;
    {
      Batch b = make_batch(std::uint64_t(seed) * 1000003u + std::uint64_t(step), B, T);
      Tensor logits = model.forward(b.tokens);
      Tensor loss = cross_entropy(logits, b.targets);
      loss_node = loss.grad_fn();
      logits_node = logits.grad_fn();
      logits_value = logits.impl_ptr();
      if (loss_node.expired() || logits_node.expired()) {
        std::cerr << "soak: step " << step << ": the loss has no graph\n";
        return 1;
      }
      opt.zero_grad();
      loss.backward();
      clip_grad_norm(model.parameters(), 1.0);
      opt.step();
      const double l = loss.item();
      if (step == 1) first_loss = l;
      running += l;
      if (step % 100 == 0) last_loss = running / 100, running = 0;
      for (const Tensor& p : model.parameters())
        if (p.grad().defined() && (p.grad().grad_fn() || p.grad().requires_grad())) ++grad_graphs;
    }
    // The step's handles are gone: its whole graph must be too.
    if (!loss_node.expired() || !logits_node.expired() || !logits_value.expired()) {
      if (graph_leaks < 5)
        std::cerr << "soak: step " << step << ": graph still alive after the step (loss node "
                  << (loss_node.expired() ? "freed" : "ALIVE") << ", logits node "
                  << (logits_node.expired() ? "freed" : "ALIVE") << ", logits value "
                  << (logits_value.expired() ? "freed" : "ALIVE") << ")\n";
      ++graph_leaks;
    }
    if (step % rss_every == 0 || step == warmup || step == steps) {
      const long kb = vm_kb("VmRSS");
      samples.emplace_back(step, kb);
      if (step == warmup) rss_warm = kb;
      if (step >= warmup) {
        rss_min = rss_min < 0 ? kb : std::min(rss_min, kb);
        rss_max = std::max(rss_max, kb);
      }
      if (step == steps) rss_end = kb;
    }
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  if (warmup == 0) rss_warm = rss_start;
  const double growth = rss_warm > 0 ? 100.0 * double(rss_end - rss_warm) / double(rss_warm) : 0.0;

  std::printf("soak: RSS samples (step:kB):");
  const std::size_t stride = std::max<std::size_t>(1, samples.size() / 10);
  for (std::size_t i = 0; i < samples.size(); i += stride) std::printf(" %ld:%ld", samples[i].first, samples[i].second);
  std::printf("\n");
  std::printf(
      "soak: %ld steps in %.1f s (%.2f ms/step); loss %.3f -> %.3f; RSS start %ld kB, after warm-up (step %ld) "
      "%ld kB, end %ld kB, min/max after warm-up %ld/%ld kB, peak (VmHWM) %ld kB; growth %+.3f%% (limit %.2f%%); "
      "graphs alive after their step: %ld; parameter grads holding a graph: %ld\n",
      steps, secs, 1000 * secs / double(steps), first_loss, last_loss, rss_start, warmup, rss_warm, rss_end, rss_min,
      rss_max, vm_kb("VmHWM"), growth, max_growth, graph_leaks, grad_graphs);
  const bool ok = growth <= max_growth && graph_leaks == 0 && grad_graphs == 0 && last_loss < first_loss;
  if (!(last_loss < first_loss)) std::printf("soak: FAIL: the loss did not decrease\n");
  if (growth > max_growth) std::printf("soak: FAIL: RSS grew by more than %.2f%%\n", max_growth);
  std::printf("soak: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
