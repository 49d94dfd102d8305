// Shared by the training examples: command line, progress bar, metrics file and plots.
// Plots are drawn by gnuplot (Debian's gnuplot-nox), driven through a pipe.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace examples {

struct CommonOptions {
  long steps = 1;             // each example sets its default
  std::uint64_t seed = 0;
  int threads = 0;             // 0: the library's default (XGRAD_NUM_THREADS, else one per core)
  std::string out = "out";
  bool resume = false;
  long eval_every = 100;
  bool no_plots = false;
  long stop_after = 0;        // stop this run after N steps, as if interrupted (0 = never)
};

inline void add_common_options(CLI::App& app, CommonOptions& o) {
  app.add_option("--steps", o.steps, "maximum training steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "random seed (model init and data)");
  app.add_option("--threads", o.threads,
                 "threads for ops (GEMM blocks, attention heads); results do not depend on it "
                 "[default: XGRAD_NUM_THREADS, else one per core]")
      ->check(CLI::Range(1, 256));
  app.add_option("--out", o.out, "output directory (metrics.json, PNGs, checkpoint)");
  app.add_flag("--resume", o.resume, "continue from <out>/checkpoint.safetensors");
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations")->check(CLI::PositiveNumber);
  app.add_flag("--no-plots", o.no_plots, "skip the PNG pictures");
  app.add_option("--stop-after", o.stop_after, "stop after this many steps of this run (to test --resume)");
}

// One line on stderr, redrawn in place on a terminal, printed every `every` steps otherwise.
class Progress {
 public:
  Progress(long start, long total) : start_(start), total_(total), tty_(isatty(2)), t0_(clock::now()) {}
  void update(long step, double loss, double acc) {
    const double secs = std::chrono::duration<double>(clock::now() - t0_).count();
    const double rate = secs > 0 ? double(step - start_) / secs : 0.0;
    const long left = rate > 0 ? long(double(total_ - step) / rate) : 0;
    const int width = 24, filled = int(double(width) * double(step) / double(std::max(total_, 1L)));
    char line[256];
    std::snprintf(line, sizeof line, "[%s%s] step %ld/%ld  loss %.4f  acc %5.1f%%  %.1f steps/s  left %ld:%02ld",
                  std::string(std::size_t(filled), '#').c_str(), std::string(std::size_t(width - filled), '.').c_str(),
                  step, total_, loss, 100 * acc, rate, left / 60, left % 60);
    if (tty_) std::cerr << "\r" << line << std::flush;
    else if (step % 100 == 0 || step == total_) std::cerr << line << "\n";
  }
  void done() {
    if (tty_) std::cerr << "\n";
  }

 private:
  using clock = std::chrono::steady_clock;
  long start_, total_;
  bool tty_;
  clock::time_point t0_;
};

inline void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  { std::ofstream(tmp) << j.dump(2) << "\n"; }
  std::filesystem::rename(tmp, path);
}

// Threads (--threads, else the library's default) and the allocator tuning for training loops.
// XGRAD_NUM_THREADS and XGRAD_CPU_PATH are read here, so a bad value stops the program before
// training rather than at the first op that needs it.
inline void setup_runtime(const CommonOptions& o) {
  if (o.threads > 0) xgrad::set_num_threads(o.threads);
  (void)xgrad::num_threads();
  (void)xgrad::cpu_path();
  xgrad::tune_allocator();
}

// What ran: results may depend on the CPU (code path, OpenBLAS kernels), never on the threads.
inline nlohmann::json runtime_json() {
  const xgrad::RuntimeInfo r = xgrad::runtime_info();
  return {{"xgrad_version", r.version}, {"commit", r.commit}, {"cpu_model", r.cpu_model},
          {"cpu_path", r.cpu_path}, {"openblas_core", r.blas_core}, {"openblas_config", r.blas_config},
          {"openblas_coretype_env", r.blas_coretype_env}, {"threads", r.num_threads}};
}

// metrics.json with the runtime section added.
inline void write_metrics(const std::string& path, nlohmann::json j) {
  j["runtime"] = runtime_json();
  write_json(path, j);
}

// Runs a gnuplot script; false (with a warning) when gnuplot is missing or fails.
inline bool gnuplot(const std::string& script) {
  FILE* p = popen("gnuplot 2>&1", "w");
  if (!p) {
    std::cerr << "warning: cannot start gnuplot (install gnuplot-nox)\n";
    return false;
  }
  std::fputs(script.c_str(), p);
  const int rc = pclose(p);
  if (rc != 0) std::cerr << "warning: gnuplot failed (exit " << rc << "): install gnuplot-nox\n";
  return rc == 0;
}

// Training loss per step and held-out accuracy per evaluation.
inline bool plot_curves(const std::string& png, const std::vector<std::pair<long, double>>& loss,
                        const std::vector<std::pair<long, double>>& accuracy) {
  std::string s = "set terminal pngcairo size 900,500\nset output '" + png + "'\n"
                  "set termoption noenhanced\nset xlabel 'step'\nset ylabel 'loss'\nset logscale y\nset format y '%g'\nset y2label 'held-out exact match'\n"
                  "set y2range [0:1]\nset ytics nomirror\nset y2tics\nset grid\nset key top right\n"
                  "plot '-' with lines title 'training loss', '-' axes x1y2 with linespoints title 'held-out exact match'\n";
  for (auto& [x, y] : loss) s += std::to_string(x) + " " + std::to_string(y) + "\n";
  s += "e\n";
  for (auto& [x, y] : accuracy) s += std::to_string(x) + " " + std::to_string(y) + "\n";
  s += "e\n";
  return gnuplot(s);
}

// One panel per (layer, head): weights[l] is (1, H, T, S); rows are queries, columns keys.
inline bool plot_attention(const std::string& png, const std::vector<xgrad::Tensor>& weights,
                           const std::vector<std::string>& query_labels,
                           const std::vector<std::string>& key_labels, const std::string& title) {
  const std::size_t L = weights.size(), H = weights[0].shape()[1];
  const std::size_t T = weights[0].shape()[2], S = weights[0].shape()[3];
  auto tics = [](const std::vector<std::string>& labels) {
    std::string t = "(";
    for (std::size_t i = 0; i < labels.size(); ++i)
      t += (i ? ", \"" : "\"") + labels[i] + "\" " + std::to_string(i);
    return t + ")";
  };
  std::string s = "set terminal pngcairo size " + std::to_string(320 * H) + "," + std::to_string(320 * L + 40) +
                  "\nset termoption noenhanced\nset output '" + png + "'\nset multiplot layout " + std::to_string(L) + "," +
                  std::to_string(H) + " title '" + title + "'\n"
                  "set palette defined (0 'white', 1 '#3060c0')\nset cbrange [0:1]\nunset colorbox\n"
                  "set xtics " + tics(key_labels) + " font ',7'\nset ytics " + tics(query_labels) + " font ',7'\n"
                  "set yrange [] reverse\nset xlabel 'key' font ',8'\nset ylabel 'query' font ',8'\n";
  for (std::size_t l = 0; l < L; ++l) {
    auto w = weights[l].to_vector();
    for (std::size_t h = 0; h < H; ++h) {
      s += "set title 'layer " + std::to_string(l) + ", head " + std::to_string(h) + "'\n";
      s += "plot '-' matrix with image notitle\n";
      for (std::size_t t = 0; t < T; ++t) {
        for (std::size_t k = 0; k < S; ++k) s += std::to_string(w[(h * T + t) * S + k]) + " ";
        s += "\n";
      }
      s += "e\n";
    }
  }
  s += "unset multiplot\n";
  return gnuplot(s);
}

}  // namespace examples

namespace examples {

struct TrainResult {
  long steps = 0;
  double accuracy = 0;          // held-out, at the last evaluation
  double seconds = 0;           // wall time of this run's training
  nlohmann::json history = nlohmann::json::array();  // {step, loss, heldout_exact_match} per evaluation
  std::vector<std::pair<long, double>> curve;        // per-step loss (evaluation means before a resume)
  std::vector<std::pair<long, double>> accuracies;   // per evaluation
};

// The training loop shared by the examples: AdamW with warmup + cosine learning rate,
// gradient clipping at 1, evaluation and an atomic checkpoint every opt.eval_every steps,
// early stop at 100% held-out accuracy, and --resume from <out>/checkpoint.safetensors.
// loss_at(step) must depend only on the step (so a resumed run sees the same data).
inline TrainResult train(const CommonOptions& opt, long total, double peak_lr, xgrad::Module& model,
                         xgrad::Optimizer& optimizer, const std::function<xgrad::Tensor(long)>& loss_at,
                         const std::function<double()>& evaluate) {
  using namespace xgrad;
  const std::string ckpt = opt.out + "/checkpoint.safetensors";
  const long warmup = std::min<long>(100, total / 10);
  TrainResult r;
  if (opt.resume) {
    load_checkpoint(ckpt, model, &optimizer);
    const auto meta = load_safetensors(ckpt).metadata;
    auto it = meta.find("history");
    if (it == meta.end())
      throw IOError("resume: " + ckpt + " has no 'history' metadata (not written by this example)");
    try {
      r.history = nlohmann::json::parse(it->second);
    } catch (const nlohmann::json::exception& e) {
      throw IOError("resume: the 'history' metadata of " + ckpt + " is not valid JSON");
    }
    std::cerr << "resumed from " << ckpt << " at step " << optimizer.steps() << "\n";
  }
  for (auto& h : r.history) {
    r.curve.emplace_back(h["step"], h["loss"]);
    r.accuracies.emplace_back(h["step"], h["heldout_exact_match"]);
  }
  r.accuracy = r.accuracies.empty() ? 0.0 : r.accuracies.back().second;
  r.steps = optimizer.steps();
  const auto t0 = std::chrono::steady_clock::now();
  Progress progress(r.steps, total);
  double running = 0;
  long since = 0;
  const long start = r.steps;
  while (r.steps < total && r.accuracy < 1.0 && (opt.stop_after == 0 || r.steps - start < opt.stop_after)) {
    optimizer.lr = warmup_cosine_lr(r.steps, peak_lr, warmup, total, peak_lr * 0.05);
    Tensor loss = loss_at(r.steps);
    optimizer.zero_grad();
    loss.backward();
    clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    ++r.steps, ++since;
    running += loss.item();
    r.curve.emplace_back(r.steps, loss.item());
    if (r.steps % opt.eval_every == 0 || r.steps == total) {
      r.accuracy = evaluate();
      r.history.push_back({{"step", r.steps}, {"loss", running / double(since)}, {"heldout_exact_match", r.accuracy}});
      r.accuracies.emplace_back(r.steps, r.accuracy);
      running = 0, since = 0;
      save_checkpoint(ckpt, model, &optimizer,
                      {{"step", std::to_string(r.steps)}, {"seed", std::to_string(opt.seed)},
                       {"history", r.history.dump()}});
    }
    progress.update(r.steps, loss.item(), r.accuracy);
  }
  progress.done();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace examples
