// libtorch_mha: the MHA workloads of bench_mha / torch_mha.py in libtorch's C++ API (Debian's
// libtorch-dev 1.13), so the comparison is not flattered by Python's per-call overhead.
//
// usage: libtorch_mha [--threads N] [--configs tiny,small,mid,large] [--reps R] [--min-time S]
//                     [--warmup S]
// Workload, per config (tiny B1 T8 E16 H2, small B8 T32 E64 H4, mid B8 T64 E128 H8, large B4
// T512 E512 H8): torch::nn::MultiheadAttention(MultiheadAttentionOptions(E, H)) (bias on,
// dropout 0; the C++ module is sequence-first, so x is (T, B, E)), self-attention with a bool
// causal attn_mask (triu(ones(T, T), 1), true = masked), need_weights false:
//   out = mha(x, x, x); loss = (out * upstream).sum(); loss.backward()
// gradients to x and every parameter, .grad reset to undefined before each iteration.
// Timing as torch_mha.py: warm-up --warmup s, then --reps repetitions of k back-to-back
// iterations (k such that a repetition lasts >= --min-time s); median of the per-iteration means.
// Threads: at::set_num_threads(N) and OpenBLAS's own pool (openblas_set_num_threads, looked up
// at run time) set to N. Prints one JSON object like torch_mha.py's, "side": "libtorch".
// Built only when CMake finds libtorch (find_package(Torch)); not part of the default build:
//   cmake --build build-bench --target libtorch_mha
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

namespace {

struct Config {
  long B, T, E, H;
};
const std::map<std::string, Config> kConfigs = {
    {"tiny", {1, 8, 16, 2}}, {"small", {8, 32, 64, 4}}, {"mid", {8, 64, 128, 8}}, {"large", {4, 512, 512, 8}}};

double mha_flops(const Config& c) {
  const double B = double(c.B), T = double(c.T), E = double(c.E);
  return 24.0 * B * T * E * E + 12.0 * B * T * T * E;
}

int set_blas_threads(int n) {
  using Set = void (*)(int);
  using Get = int (*)();
  auto set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) return -1;
  set(n);
  return get();
}

template <class F>
std::string time_fn(F&& fn, int reps, double min_time, double warmup) {
  using clock = std::chrono::steady_clock;
  const auto secs = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  const auto t0 = clock::now();
  long calls = 0;
  while (calls < 2 || secs(t0) < warmup) fn(), ++calls;
  const double one = secs(t0) / double(calls);
  const long k = std::max(1L, long(std::ceil(min_time / std::max(one, 1e-9))));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto s = clock::now();
    for (long i = 0; i < k; ++i) fn();
    ms.push_back(secs(s) / double(k) * 1e3);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  double mean = 0;
  for (double v : ms) mean += v / double(n);
  std::ostringstream o;
  o << "\"median_ms\": " << median << ", \"mean_ms\": " << mean << ", \"min_ms\": " << sorted.front()
    << ", \"max_ms\": " << sorted.back() << ", \"reps\": " << reps << ", \"iters_per_rep\": " << k;
  return o.str();
}

[[noreturn]] void usage() {
  std::cerr << "usage: libtorch_mha [--threads N] [--configs tiny,small,mid,large] [--reps R] [--min-time S]"
               " [--warmup S]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 15;
  double min_time = 0.1, warmup = 0.3;
  std::string configs = "tiny,small,mid,large";
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage();
    const std::string v = argv[i + 1];
    if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else if (a == "--min-time") min_time = std::atof(v.c_str());
    else if (a == "--warmup") warmup = std::atof(v.c_str());
    else if (a == "--configs") configs = v;
    else usage();
  }
  if (threads < 1 || reps < 1) usage();
  at::set_num_threads(threads);
  const int blas = set_blas_threads(threads);
  std::ostringstream results;
  std::stringstream list(configs);
  std::string name;
  bool first = true;
  while (std::getline(list, name, ',')) {
    if (name.empty()) continue;
    const auto it = kConfigs.find(name);
    if (it == kConfigs.end()) usage();
    const Config c = it->second;
    torch::manual_seed(0);
    torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(c.E, c.H));
    torch::Tensor x = torch::randn({c.T, c.B, c.E}).requires_grad_(true);
    const torch::Tensor upstream = torch::randn({c.T, c.B, c.E});
    const torch::Tensor mask = torch::triu(torch::ones({c.T, c.T}, torch::kBool), 1);
    auto params = mha->parameters();
    auto step = [&] {
      x.mutable_grad() = torch::Tensor();
      for (auto& p : params) p.mutable_grad() = torch::Tensor();
      torch::Tensor out = std::get<0>(mha->forward(x, x, x, /*key_padding_mask=*/{}, /*need_weights=*/false, mask));
      (out * upstream).sum().backward();
    };
    const std::string timing = time_fn(step, reps, min_time, warmup);
    const double flops = mha_flops(c);
    results << (first ? "" : ",\n  ") << "{\"name\": \"mha/" << name << "\", " << timing << ", \"B\": " << c.B
            << ", \"T\": " << c.T << ", \"E\": " << c.E << ", \"H\": " << c.H << ", \"gflop\": " << flops * 1e-9
            << "}";
    first = false;
  }
  std::cout << "{\"side\": \"libtorch\", \"torch_version\": \"" << TORCH_VERSION << "\", \"threads\": " << threads
            << ", \"torch_threads\": " << at::get_num_threads() << ", \"openblas_threads\": " << blas
            << ", \"results\": [\n  " << results.str() << "]}\n";
  return 0;
}
