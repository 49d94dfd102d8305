// attention_memory: peak resident memory and time of one MultiHeadAttention forward + backward
// at a given sequence length (issue 18: attention memory linear in T).
//
// usage: attention_memory --T N [--B 1] [--E 512] [--H 8] [--reps 1] [--threads 1]
// Self-attention, float32, is_causal, need_weights off, bias on, as bench_mha's BM_mha:
//   out = mha(x, x, x); sum(out * upstream).backward()   (gradients to x and every parameter)
// One untimed warm-up iteration, then --reps timed ones (median reported). Prints one JSON
// line: {"side": "xgrad", "B", "T", "E", "H", "threads", "median_ms", "ms_per_token",
//        "baseline_rss_kb": VmRSS before the model, "peak_rss_kb": getrusage ru_maxrss}.
// One process per T (benchmarks/attention_memory.sh), so each peak is that T's alone. The
// PyTorch counterpart is benchmarks/torch_attention_memory.py.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"
#include "proc_status.hpp"

namespace {

[[noreturn]] void usage() {
  std::cerr << "usage: attention_memory --T N [--B 1] [--E 512] [--H 8] [--reps 1] [--threads 1]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  long B = 1, T = 0, E = 512, H = 8, reps = 1, threads = 1;
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (i + 1 >= argc) usage();
    char* end = nullptr;
    const long v = std::strtol(argv[i + 1], &end, 10);
    if (*end != '\0' || v < 1) usage();
    if (name == "--T") T = v;
    else if (name == "--B") B = v;
    else if (name == "--E") E = v;
    else if (name == "--H") H = v;
    else if (name == "--reps") reps = v;
    else if (name == "--threads") threads = v;
    else usage();
  }
  if (T == 0) usage();
  xgrad::set_num_threads(int(threads));
  xgrad::tune_allocator();
  const long baseline = status_kb("VmRSS");
  const auto sz = [](long v) { return std::size_t(v); };
  xgrad::Rng rng(0);
  xgrad::MultiHeadAttention mha(xgrad::MultiHeadAttentionOptions(sz(E), sz(H)), rng);
  xgrad::Tensor x = xgrad::randn({sz(B), sz(T), sz(E)}, rng).set_requires_grad();
  const xgrad::Tensor upstream = xgrad::randn({sz(B), sz(T), sz(E)}, rng);
  xgrad::AttentionOptions opt;
  opt.is_causal = true;
  opt.need_weights = false;
  const auto params = mha.parameters();
  auto step = [&] {
    x.zero_grad();
    for (const auto& p : params) p.zero_grad();
    xgrad::Tensor out = mha.forward(x, opt).output;
    xgrad::sum(xgrad::mul(out, upstream)).backward();
  };
  step();  // warm-up
  std::vector<double> ms;
  for (long r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::cout << "{\"side\": \"xgrad\", \"B\": " << B << ", \"T\": " << T << ", \"E\": " << E << ", \"H\": " << H
            << ", \"threads\": " << threads << ", \"reps\": " << reps << ", \"median_ms\": " << median
            << ", \"ms_per_token\": " << median / double(B * T) << ", \"baseline_rss_kb\": " << baseline
            << ", \"peak_rss_kb\": " << ru.ru_maxrss << "}\n";
  return 0;
}
