// train_step_rss: peak resident memory of the reverse example's training step.
//
// usage: train_step_rss [--steps N] [--threads N] [--dense]   (defaults: 50 steps, 1 thread)
// Runs N training steps (benchmarks/reverse_step.hpp: the `reverse` example's default model,
// batch 64, AdamW; --dense: every position, padding included, as skip_padding false) and
// prints one JSON line:
//   {"side": "xgrad", "steps": N, "threads": n, "skip_padding": true / false, "seconds_per_step": s,
//    "final_loss": the last step's loss, "baseline_rss_kb": VmRSS before the model is built,
//    "peak_rss_kb": VmHWM at the end}
// Read by benchmarks/compare.sh; the PyTorch counterpart is `torch_mha.py --rss N`.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "reverse_step.hpp"
#include "proc_status.hpp"

namespace {

long arg_value(int argc, char** argv, const std::string& name, long def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) {
      char* end = nullptr;
      const long v = std::strtol(argv[i + 1], &end, 10);
      if (*end != '\0' || v < 1) {
        std::cerr << "train_step_rss: " << name << " needs a positive integer\n";
        std::exit(2);
      }
      return v;
    }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  bool dense = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dense") {
      dense = true;
    } else if ((a == "--steps" || a == "--threads") && i + 1 < argc) {
      ++i;  // its value: arg_value reads it
    } else {
      std::cerr << "usage: train_step_rss [--steps N] [--threads N] [--dense]\n";
      return 2;
    }
  }
  const long steps = arg_value(argc, argv, "--steps", 50);
  const int threads = int(arg_value(argc, argv, "--threads", 1));
  xgrad::set_num_threads(threads);
  xgrad::tune_allocator();
  const long baseline = status_kb("VmRSS");
  xgrad_bench::ReverseTrainer trainer(!dense);
  double loss = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (long s = 0; s < steps; ++s) loss = trainer.step().item();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "{\"side\": \"xgrad\", \"steps\": " << steps << ", \"threads\": " << threads
            << ", \"skip_padding\": " << (dense ? "false" : "true") << ", \"seconds_per_step\": " << secs / double(steps) << ", \"final_loss\": " << loss
            << ", \"baseline_rss_kb\": " << baseline << ", \"peak_rss_kb\": " << status_kb("VmHWM")
            << "}\n";
  return 0;
}
