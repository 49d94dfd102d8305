// Shared by the training examples: command line, progress bar, training loop, metrics file
// and plots. Plots are drawn by gnuplot (Debian's gnuplot-nox) from a temporary script file.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace examples {

// --- command-line values ------------------------------------------------------------------
// CLI11 reports a validator's message as "--option: message".

// A whole number in [lo, hi], written in decimal with an optional sign. The string is
// rewritten in canonical form (CLI11 would read "010" as octal and wrap "-1" into an
// unsigned option), so the value parsed is the value checked.
inline CLI::Validator whole_number(long long lo, unsigned long long hi) {
  const std::string span = std::to_string(lo) + " to " +
                           (hi == std::numeric_limits<unsigned long long>::max() ? "2^64 - 1" : std::to_string(hi));
  const std::string range = "a whole number from " + span;
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        std::size_t i = 0;
        bool negative = false;
        if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
        if (i == s.size()) return "'" + s + "' is not a whole number; allowed: " + range;
        unsigned long long m = 0;
        bool too_big = false;
        for (; i < s.size(); ++i) {
          if (s[i] < '0' || s[i] > '9') return "'" + s + "' is not a whole number; allowed: " + range;
          const unsigned d = unsigned(s[i] - '0');
          if (m > (std::numeric_limits<unsigned long long>::max() - d) / 10) too_big = true;
          else m = m * 10 + d;
        }
        const bool below = negative ? m != 0 && (lo >= 0 || m > 0ull - static_cast<unsigned long long>(lo))
                                    : lo > 0 && m < static_cast<unsigned long long>(lo);
        if (negative && m != 0 && lo >= 0) return s + " is negative; allowed: " + range;
        if (too_big || below || (!negative && m > hi)) return s + " is out of range; allowed: " + range;
        s = (negative && m != 0 ? "-" : "") + std::to_string(m);
        return "";
      },
      span);
}

// A finite number that `ok` accepts; `allowed` says which in the message, `desc` in --help.
inline CLI::Validator finite_number_where(bool (*ok)(double), const std::string& allowed, const std::string& desc) {
  return CLI::Validator(
      [ok, allowed](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
          return "'" + s + "' is not a finite number; allowed: " + allowed;
        if (!ok(v)) return s + " is out of range; allowed: " + allowed;
        return "";
      },
      desc);
}
// A finite number greater than 0 (or, with allow_zero, >= 0).
inline CLI::Validator finite_number(bool allow_zero) {
  if (allow_zero) return finite_number_where([](double v) { return v >= 0; }, "a number >= 0", ">= 0");
  return finite_number_where([](double v) { return v > 0; }, "a number greater than 0", "> 0");
}
// A finite number in [0, 1) (a label smoothing, a dropout rate).
inline CLI::Validator fraction_below_one() {
  return finite_number_where([](double v) { return v >= 0 && v < 1; }, "a number >= 0 and < 1", "[0, 1)");
}
inline CLI::Validator positive_number() { return finite_number(false); }
inline CLI::Validator non_negative_number() { return finite_number(true); }

// --help: "--steps INT:1 to 1000000000   maximum training steps ... [default: 3000]".
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(40); }
  std::string make_option_opts(const CLI::Option* o) const override {
    return o->get_type_size() != 0 && !o->get_type_name().empty() ? " " + o->get_type_name() : "";
  }
  std::string make_option_desc(const CLI::Option* o) const override {
    std::string d = o->get_description();
    if (o->get_type_size() != 0 && !o->get_default_str().empty()) d += " [default: " + o->get_default_str() + "]";
    if (o->get_expected_max() == 0 && !o->check_lname("help")) d += " [default: off]";
    return d;
  }
};

// --- the run's configuration ----------------------------------------------------------------

// The options that define a training run — everything that changes its trajectory (the
// learning-rate schedule derives from --steps, the data from --seed, ...). save_checkpoint
// stores them in the metadata ("run_config"). With --resume, an option not given takes the
// stored value (so `--resume --out DIR` alone continues the same run), and one given with
// another value is refused: a resumed run is always the uninterrupted run, bit for bit.
// Options that do not change the trajectory (--threads, --out, --no-plots, --stop-after,
// and what an example does after training) are free.
class RunConfig {
 public:
  explicit RunConfig(std::string example) : example_(std::move(example)) {}
  const std::string& example() const { return example_; }

  // Adds an option with its default shown in --help and tracks it.
  template <class T>
  CLI::Option* add(CLI::App& app, const std::string& name, T& var, const std::string& help,
                   const CLI::Validator& check) {
    CLI::Option* o = app.add_option(name, var, help)->capture_default_str()->transform(check);
    T* p = &var;
    entries_.push_back({name, o, check, [p] { return nlohmann::json(*p); },
                        [p](const nlohmann::json& j) { *p = j.get<T>(); }});
    return o;
  }

  // A flag (true when given) that changes the trajectory (e.g. --flip augmentation), tracked
  // like an option.
  CLI::Option* add_flag(CLI::App& app, const std::string& name, bool& var, const std::string& help) {
    CLI::Option* o = app.add_flag(name, var, help);
    bool* p = &var;
    entries_.push_back({name, o, CLI::Validator(), [p] { return nlohmann::json(*p); },
                        [p](const nlohmann::json& j) { *p = j.get<bool>(); }});
    return o;
  }

  nlohmann::json to_json() const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& e : entries_) j[e.name] = e.get();
    return j;
  }

  // On --resume: reads the stored configuration from the metadata `meta` of `ckpt`, takes the
  // stored value of every option not given and refuses a given one that differs. Throws
  // IOError naming the file.
  void resolve(const std::string& ckpt, const std::map<std::string, std::string>& meta) {
    auto fail = [&](const std::string& msg) { throw xgrad::IOError("--resume: " + ckpt + ": " + msg); };
    auto ex = meta.find("example");
    if (ex == meta.end() || meta.find("run_config") == meta.end())
      fail("no 'example' / 'run_config' metadata (not a checkpoint of this version of " + example_ + ")");
    if (ex->second != example_) fail("written by '" + ex->second + "', not by '" + example_ + "'");
    nlohmann::json stored;
    try {
      stored = nlohmann::json::parse(meta.at("run_config"));
    } catch (const nlohmann::json::exception&) {
      fail("the 'run_config' metadata is not valid JSON");
    }
    if (!stored.is_object()) fail("the 'run_config' metadata is not a JSON object");
    for (auto it = stored.begin(); it != stored.end(); ++it)
      if (std::none_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == it.key(); }))
        fail("the stored run has option " + it.key() + ", which " + example_ + " does not have");
    std::vector<std::pair<Entry*, nlohmann::json>> take;
    for (auto& e : entries_) {
      auto it = stored.find(e.name);
      if (it == stored.end()) fail("the stored run lacks option " + e.name);
      if (e.option->count() > 0) {
        if (e.get() != *it)
          fail(e.name + " " + e.get().dump() + " differs from the stored run's " + e.name + " " + it->dump() +
               " (the options of a run cannot change on resume: omit " + e.name +
               " to continue the stored run, or start a new run in another --out)");
      } else {
        take.emplace_back(&e, *it);
      }
    }
    // The stored values pass the options' own checks before any is taken.
    for (auto& [e, value] : take) {
      std::string text = value.dump();
      // Numbers and text (e.g. --pool mean) pass the option's check; a flag's stored true/false is taken as it is.
      if (value.is_string()) text = value.get<std::string>();
      const std::string problem = value.is_number() || value.is_string() ? e->check(text)
                                  : value.is_boolean()                   ? std::string()
                                                                         : "not a number, text or true/false";
      if (!problem.empty()) fail("the stored " + e->name + " " + value.dump() + " is invalid: " + problem);
    }
    for (auto& [e, value] : take) e->set(value);
  }

 private:
  struct Entry {
    std::string name;
    CLI::Option* option;
    CLI::Validator check;
    std::function<nlohmann::json()> get;
    std::function<void(const nlohmann::json&)> set;
  };
  std::string example_;
  std::vector<Entry> entries_;
};

struct CommonOptions {
  long steps = 1;             // each example sets its default
  std::uint64_t seed = 0;
  int threads = 0;             // 0: the library's default (XGRAD_NUM_THREADS, else one per core)
  std::string out = "out";
  bool resume = false;
  long eval_every = 100;
  bool no_plots = false;
  long stop_after = 0;        // stop this run after N steps, as if interrupted (0 = never)
  double max_grad_norm = 1.0;  // train() clips the gradient's norm to this (0 = no clipping)
};

constexpr long kMaxSteps = 1000000000;

// --steps, --seed, --threads and --out, for every example (extend has only these); with a
// RunConfig, --steps and --seed are tracked.
inline void add_basic_options(CLI::App& app, CommonOptions& o, RunConfig* run = nullptr) {
  app.formatter(std::make_shared<HelpFormatter>());
  auto option = [&](const std::string& name, auto& var, const std::string& help, const CLI::Validator& check) {
    if (run) return run->add(app, name, var, help, check);
    return app.add_option(name, var, help)->capture_default_str()->transform(check);
  };
  option("--steps", o.steps, run ? "maximum training steps (the learning-rate schedule derives from it)" : "training steps",
         whole_number(1, kMaxSteps));
  option("--seed", o.seed, "random seed (model init and data)", whole_number(0, std::numeric_limits<std::uint64_t>::max()));
  app.add_option("--threads", o.threads,
                 "threads for ops (GEMM blocks, attention heads); results do not depend on it")
      ->transform(whole_number(1, 256))
      ->default_str("decided at run time: XGRAD_NUM_THREADS if set, else one per core");
  app.add_option("--out", o.out, run ? "output directory (metrics.json, PNGs, checkpoint)" : "output directory (metrics.json)")
      ->capture_default_str();
}

// The training examples' options: the basic ones, --resume, --eval-every, --no-plots and
// --stop-after. --steps, --seed and --eval-every define the run (tracked by `run`); the
// others are free.
inline void add_common_options(CLI::App& app, CommonOptions& o, RunConfig& run) {
  add_basic_options(app, o, &run);
  app.add_flag("--resume", o.resume,
               "continue the run stored in <out>/checkpoint.safetensors; options not given take "
               "the stored values, a different --steps, --seed, model size, ... is refused; a finished "
               "run is left as it is");
  run.add(app, "--eval-every", o.eval_every, "steps between held-out evaluations (and checkpoints)",
          whole_number(1, kMaxSteps));
  app.add_flag("--no-plots", o.no_plots, "skip the PNG pictures");
  app.add_option("--stop-after", o.stop_after,
                 "stop after this many steps of this run, as if interrupted, with a checkpoint at that "
                 "step (0 = never; to test --resume)")
      ->capture_default_str()
      ->transform(whole_number(0, kMaxSteps));
}

// The step of a checkpoint's "step" metadata and the held-out accuracy of its last evaluation
// (0 before the first). False when either is missing or malformed (train() then says what).
inline bool stored_progress(const std::map<std::string, std::string>& meta, long& step, double& accuracy) {
  auto s = meta.find("step"), h = meta.find("history");
  if (s == meta.end() || h == meta.end()) return false;
  try {
    const nlohmann::json st = nlohmann::json::parse(s->second), hist = nlohmann::json::parse(h->second);
    if (!st.is_number_integer() || !hist.is_array()) return false;
    step = st.get<long>();
    accuracy = hist.empty() ? 0.0 : hist.back().at("heldout_exact_match").get<double>();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// After parsing, with --resume: refuses an --out without a checkpoint, takes the stored run's
// options (RunConfig::resolve) and returns true when the stored run is already finished — its
// checkpoint is at --steps, or it stopped early at 100% held-out accuracy. Then a line on
// stdout says so and the caller exits 0 without touching any file.
inline bool resolve_resume(const CommonOptions& o, RunConfig& run) {
  if (!o.resume) return false;
  const std::string ckpt = o.out + "/checkpoint.safetensors";
  std::error_code ec;
  if (!std::filesystem::exists(ckpt, ec) && !ec)
    throw xgrad::IOError("--resume: no checkpoint in " + o.out + " to resume from; run without --resume first");
  const auto meta = xgrad::load_safetensors(ckpt).metadata;
  run.resolve(ckpt, meta);
  long step = 0;
  double accuracy = 0;
  if (!stored_progress(meta, step, accuracy) || (step < o.steps && accuracy < 1.0)) return false;
  std::cout << run.example() << ": the run in " << o.out << " is already finished ("
            << (step >= o.steps ? "step " + std::to_string(step) + " of --steps " + std::to_string(o.steps)
                                : "stopped early at step " + std::to_string(step) + " of " + std::to_string(o.steps) +
                                      " with 100% held-out accuracy")
            << "); nothing to do, nothing changed\n";
  return true;
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

// Writes j to path through path.tmp and a rename, so a reader never sees half a file; on any
// failure (IOError naming the path) the temporary file is removed and path is unchanged.
inline void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    out.close();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      xgrad::throw_error<xgrad::IOError>("write_json", "cannot write '", tmp, "'");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    xgrad::throw_error<xgrad::IOError>("write_json", "cannot replace '", path, "' (", ec.message(), ")");
  }
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

// Runs a gnuplot script. Returns "" on success, else what went wrong: gnuplot missing from
// PATH, or gnuplot's exit status and its own error output (lines joined with " | ").
inline std::string run_gnuplot(const std::string& script) {
  bool found = false;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (std::size_t b = 0; !found && b <= dirs.size();) {
    std::size_t e = dirs.find(':', b);
    if (e == std::string::npos) e = dirs.size();
    const std::string dir = e > b ? dirs.substr(b, e - b) : ".";
    found = ::access((dir + "/gnuplot").c_str(), X_OK) == 0;
    b = e + 1;
  }
  if (!found) return "gnuplot is not installed (not found on PATH; Debian: apt-get install gnuplot-nox)";
  std::string tmpl = (std::filesystem::temp_directory_path() / "xgrad-plot-XXXXXX").string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return "cannot create a temporary file for the gnuplot script: " + std::string(std::strerror(errno));
  const bool wrote = ::write(fd, script.data(), script.size()) == ssize_t(script.size());
  ::close(fd);
  std::string quoted = "'";
  for (char c : tmpl) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  std::string output;
  int status = -1;
  if (wrote) {
    if (FILE* p = ::popen(("gnuplot " + quoted + " 2>&1").c_str(), "r")) {
      char buf[4096];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
      status = ::pclose(p);
    }
  }
  std::remove(tmpl.c_str());
  if (!wrote) return "cannot write the gnuplot script to " + tmpl;
  if (status == 0) return "";
  std::string lines;
  std::size_t b = 0;
  while (b < output.size()) {
    std::size_t e = output.find('\n', b);
    if (e == std::string::npos) e = output.size();
    std::string line = output.substr(b, e - b);
    b = e + 1;
    line.erase(0, line.find_first_not_of(" \t\r"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (line.empty() || line.find_first_not_of("^ ") == std::string::npos) continue;
    lines += (lines.empty() ? "" : " | ") + line;
  }
  std::string how = status == -1 ? std::string("could not be started")
                    : WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                    : WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                          : "failed";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) how += " (the shell could not run it)";
  return "gnuplot " + how + (lines.empty() ? std::string(", no output") : ": " + lines);
}

// A gnuplot single-quoted string: quotes inside are doubled ('it''s').
inline std::string gp_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

// The PNG pictures of a run. Nothing is drawn with --no-plots; after the first failure the
// other pictures are skipped (one warning on stderr). `written` lists what was drawn.
class Plots {
 public:
  explicit Plots(bool enabled) : enabled_(enabled) {}
  void draw(const std::string& png, const std::string& script) {
    if (!enabled_ || !ok_) return;
    const std::string problem = run_gnuplot(script);
    if (problem.empty()) {
      written_.push_back(std::filesystem::path(png).filename().string());
      return;
    }
    ok_ = false;
    std::cerr << "warning: no " << png << ": " << problem << "; other pictures skipped\n";
  }
  bool ok() const { return ok_; }
  const std::vector<std::string>& written() const { return written_; }

 private:
  bool enabled_, ok_ = true;
  std::vector<std::string> written_;
};

// "wrote DIR/{a,b,c}" for the files an example wrote.
inline std::string wrote_line(const std::string& dir, const std::vector<std::string>& files) {
  std::string s;
  for (const auto& f : files) s += (s.empty() ? "" : ",") + f;
  return "wrote " + dir + "/{" + s + "}";
}

// Training loss per step and held-out accuracy per evaluation.
inline std::string curves_script(const std::string& png, const std::vector<std::pair<long, double>>& loss,
                                 const std::vector<std::pair<long, double>>& accuracy) {
  std::string s = "set terminal pngcairo size 900,500\nset output " + gp_quote(png) + "\n"
                  "set termoption noenhanced\nset xlabel 'step'\nset ylabel 'loss'\nset logscale y\nset format y '%g'\nset y2label 'held-out exact match'\n"
                  "set y2range [0:1]\nset ytics nomirror\nset y2tics\nset grid\nset key top right\n"
                  "plot '-' with lines title 'training loss', '-' axes x1y2 with linespoints title 'held-out exact match'\n";
  char num[64];
  for (auto& [x, y] : loss) {
    std::snprintf(num, sizeof num, "%ld %.9g\n", x, y);
    s += num;
  }
  s += "e\n";
  for (auto& [x, y] : accuracy) {
    std::snprintf(num, sizeof num, "%ld %.9g\n", x, y);
    s += num;
  }
  s += "e\n";
  return s;
}

// Several curves over training steps: each on the left axis (log scale when `log_left`) or the
// right one (range [0, 1] unless right_range is given as "[lo:hi]").
struct Curve {
  std::string title;
  std::vector<std::pair<long, double>> points;
  bool right_axis = false;
};
inline std::string lines_script(const std::string& png, const std::string& title, const std::vector<Curve>& curves,
                                const std::string& left_label, const std::string& right_label, bool log_left = true,
                                const std::string& right_range = "[0:1]") {
  std::string s = "set terminal pngcairo size 900,500\nset output " + gp_quote(png) + "\nset termoption noenhanced\n"
                  "set title " + gp_quote(title) + "\nset xlabel 'step'\nset ylabel " + gp_quote(left_label) + "\n" +
                  (log_left ? "set logscale y\nset format y '%g'\n" : "") + "set y2label " + gp_quote(right_label) +
                  "\nset y2range " + right_range + "\nset ytics nomirror\nset y2tics\nset grid\nset key top right\nplot ";
  for (std::size_t i = 0; i < curves.size(); ++i)
    s += std::string(i ? ", " : "") + "'-' " + (curves[i].right_axis ? "axes x1y2 " : "") +
         (curves[i].points.size() > 200 ? "with lines" : "with linespoints") + " title " + gp_quote(curves[i].title);
  s += "\n";
  char num[64];
  for (const auto& c : curves) {
    for (const auto& p : c.points) {
      std::snprintf(num, sizeof num, "%ld %.9g\n", p.first, p.second);
      s += num;
    }
    if (c.points.empty()) s += "0 NaN\n";
    s += "e\n";
  }
  return s;
}

// One panel per (layer, head): weights[l] is (1, H, T, S); rows are queries, columns keys.
inline std::string attention_script(const std::string& png, const std::vector<xgrad::Tensor>& weights,
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
                  "\nset termoption noenhanced\nset output " + gp_quote(png) + "\nset multiplot layout " + std::to_string(L) + "," +
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
  return s;
}

}  // namespace examples

namespace examples {

struct TrainResult {
  long steps = 0;
  double accuracy = 0;          // held-out, at the last evaluation
  double seconds = 0;           // wall time of this run's training (this process)
  double total_seconds = 0;     // of the whole run: earlier runs (from the checkpoint) + this one
  bool saved = false;           // this run wrote the checkpoint
  long checkpoint_step = 0;     // the step of the checkpoint this run wrote last
  bool stopped = false;         // this run ended at --stop-after before the run was finished
  nlohmann::json history = nlohmann::json::array();  // {step, loss, heldout_exact_match} per evaluation
  std::vector<std::pair<long, double>> curve;        // (step, training loss) for every step since step 1
  std::vector<std::pair<long, double>> accuracies;   // per evaluation
};

// "12.3 s training in total, 4.5 s in this run" (the total includes the runs before a --resume).
inline std::string seconds_text(const TrainResult& r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.3g s training in total, %.3g s in this run", r.total_seconds, r.seconds);
  return buf;
}

// " (at step N)" when the last held-out evaluation is older than the run's last step, and
// " (no evaluation yet)" before the first (a run stopped by --stop-after), else "".
inline std::string evaluated_at(const TrainResult& r) {
  if (r.accuracies.empty()) return r.steps > 0 ? " (no evaluation yet)" : "";
  if (r.accuracies.back().first == r.steps) return "";
  return " (at step " + std::to_string(r.accuracies.back().first) + ")";
}

// "wrote DIR/{metrics.json,...,checkpoint.safetensors} (checkpoint at step N)", and when
// --stop-after ended the run early, how to continue it.
inline std::string outputs_line(const std::string& dir, const std::vector<std::string>& pictures,
                                const TrainResult& r) {
  std::vector<std::string> files{"metrics.json"};
  files.insert(files.end(), pictures.begin(), pictures.end());
  if (r.saved) files.push_back("checkpoint.safetensors");
  std::string s = wrote_line(dir, files);
  if (r.saved) s += " (checkpoint at step " + std::to_string(r.checkpoint_step) + ")";
  if (r.stopped) s += "; stopped by --stop-after: continue with --resume --out " + dir;
  return s;
}

// Data parallelism for train() (examples/reverse.cpp run by mpirun sets it; null: one process).
// Every rank runs train() with the same arguments on its own shard of each step's batch.
struct Parallel {
  bool root = true;  // this rank prints the progress and the resume line
  // The global batch's loss from this rank's loss value (the same on every rank; collective).
  std::function<double(double)> global_loss;
  // Clips the gradients of every parameter at max_norm, returns the total norm (collective).
  std::function<double(double)> clip_grad_norm;
  // Writes (rank 0) / reads (every rank) the checkpoint of model and optimizer (collective).
  std::function<void(const std::string&, const std::map<std::string, std::string>&)> save;
  std::function<std::map<std::string, std::string>(const std::string&)> load;
};

// The training loop shared by the examples: AdamW with warmup + cosine learning rate,
// gradient clipping at 1, evaluation and an atomic checkpoint every opt.eval_every steps,
// early stop at 100% held-out accuracy, and --resume from <out>/checkpoint.safetensors.
// When --stop-after ends the run before it is finished, a checkpoint is also written at the
// step where it stopped, so --resume loses no step.
// loss_at(step) must depend only on the step (so a resumed run sees the same data).
// The checkpoint's metadata holds the run's configuration (run.to_json(), checked by
// resolve_resume before the model is built), the evaluation history, the loss of every
// step and the training wall time so far ("train_seconds", summed over the runs), so a
// resumed run's curve and metrics are those of the uninterrupted run: an evaluation's
// "loss" (the mean training loss since the previous evaluation) is summed again from the
// stored per-step losses, in the same order.
// What an evaluation reports: the held-out accuracy (the early-stop rule and the progress bar
// read it; stored as "heldout_exact_match") and any other figures (e.g. {"test_loss": 0.31}),
// stored in the same history entry.
struct Evaluation {
  double accuracy = 0;
  nlohmann::json extra = nlohmann::json::object();
};

inline TrainResult train(const CommonOptions& opt, const RunConfig& run, long total, double peak_lr,
                         xgrad::Module& model, xgrad::Optimizer& optimizer,
                         const std::function<xgrad::Tensor(long)>& loss_at, const std::function<Evaluation()>& evaluate,
                         const std::map<std::string, std::string>& extra_metadata = {},
                         const Parallel* parallel = nullptr);

inline TrainResult train(const CommonOptions& opt, const RunConfig& run, long total, double peak_lr,
                         xgrad::Module& model, xgrad::Optimizer& optimizer,
                         const std::function<xgrad::Tensor(long)>& loss_at, const std::function<double()>& evaluate,
                         const Parallel* parallel = nullptr) {
  return train(opt, run, total, peak_lr, model, optimizer, loss_at,
               std::function<Evaluation()>([&evaluate] { return Evaluation{evaluate(), nlohmann::json::object()}; }), {},
               parallel);
}

inline TrainResult train(const CommonOptions& opt, const RunConfig& run, long total, double peak_lr,
                         xgrad::Module& model, xgrad::Optimizer& optimizer,
                         const std::function<xgrad::Tensor(long)>& loss_at, const std::function<Evaluation()>& evaluate,
                         const std::map<std::string, std::string>& extra_metadata, const Parallel* parallel) {
  using namespace xgrad;
  const std::string ckpt = opt.out + "/checkpoint.safetensors";
  const long warmup = std::min<long>(100, total / 10);
  TrainResult r;
  nlohmann::json losses = nlohmann::json::array();  // training loss of steps 1, 2, ...
  double earlier_seconds = 0;                       // training wall time of the earlier runs
  double running = 0;                               // sum of the training losses since the last evaluation
  long since = 0;                                   // steps since the last evaluation
  if (opt.resume) {
    const auto meta = parallel ? parallel->load(ckpt) : load_checkpoint(ckpt, model, &optimizer);
    for (const char* key : {"history", "losses", "train_seconds"}) {
      auto it = meta.find(key);
      if (it == meta.end())
        throw IOError("resume: " + ckpt + " has no '" + key + "' metadata (not written by this version of " +
                      run.example() + ")");
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(it->second);
      } catch (const nlohmann::json::exception&) {
        throw IOError("resume: the '" + std::string(key) + "' metadata of " + ckpt + " is not valid JSON");
      }
      if (std::string(key) == "train_seconds") {
        if (!j.is_number() || !(j.get<double>() >= 0) || !std::isfinite(j.get<double>()))
          throw IOError("resume: the 'train_seconds' metadata of " + ckpt + " is not a number of seconds >= 0");
        earlier_seconds = j.get<double>();
        continue;
      }
      if (!j.is_array()) throw IOError("resume: the '" + std::string(key) + "' metadata of " + ckpt + " is not a list");
      (std::string(key) == "history" ? r.history : losses) = std::move(j);
    }
    if (losses.size() != std::size_t(optimizer.steps()) ||
        !std::all_of(losses.begin(), losses.end(), [](const nlohmann::json& v) { return v.is_number(); }))
      throw IOError("resume: the 'losses' metadata of " + ckpt + " is not one number per step (" +
                    std::to_string(optimizer.steps()) + " steps)");
    try {
      for (auto& h : r.history) r.accuracies.emplace_back(h.at("step").get<long>(), h.at("heldout_exact_match").get<double>());
    } catch (const nlohmann::json::exception&) {
      throw IOError("resume: an entry of the 'history' metadata of " + ckpt + " lacks 'step' or 'heldout_exact_match'");
    }
    const long last_eval = r.accuracies.empty() ? 0 : r.accuracies.back().first;
    if (last_eval < 0 || last_eval > optimizer.steps())
      throw IOError("resume: the last evaluation of " + ckpt + " is at step " + std::to_string(last_eval) +
                    ", not within the checkpoint's " + std::to_string(optimizer.steps()) + " steps");
    for (std::size_t i = 0; i < losses.size(); ++i) {
      const double l = losses[i].get<double>();
      r.curve.emplace_back(long(i) + 1, l);
      if (long(i) >= last_eval) running += l, ++since;
    }
    if (!parallel || parallel->root) std::cerr << "resumed from " << ckpt << " at step " << optimizer.steps() << "\n";
  }
  r.accuracy = r.accuracies.empty() ? 0.0 : r.accuracies.back().second;
  r.steps = optimizer.steps();
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto save = [&] {
    std::map<std::string, std::string> meta = extra_metadata;  // e.g. a vocabulary; the entries below win
    for (auto& [key, value] : std::map<std::string, std::string>{
             {"step", std::to_string(r.steps)}, {"seed", std::to_string(opt.seed)},
             {"example", run.example()}, {"run_config", run.to_json().dump()},
             {"history", r.history.dump()}, {"losses", losses.dump()},
             {"train_seconds", nlohmann::json(earlier_seconds + elapsed()).dump()}})
      meta[key] = value;
    if (parallel) parallel->save(ckpt, meta);
    else save_checkpoint(ckpt, model, &optimizer, meta);
    r.saved = true;
    r.checkpoint_step = r.steps;
  };
  Progress progress(r.steps, total);
  const long start = r.steps;
  while (r.steps < total && r.accuracy < 1.0 && (opt.stop_after == 0 || r.steps - start < opt.stop_after)) {
    optimizer.lr = warmup_cosine_lr(r.steps, peak_lr, warmup, total, peak_lr * 0.05);
    Tensor loss = loss_at(r.steps);
    optimizer.zero_grad();
    loss.backward();
    if (opt.max_grad_norm > 0) {
      if (parallel) parallel->clip_grad_norm(opt.max_grad_norm);
      else clip_grad_norm(model.parameters(), opt.max_grad_norm);
    }
    optimizer.step();
    ++r.steps, ++since;
    const double loss_value = parallel ? parallel->global_loss(loss.item()) : loss.item();
    running += loss_value;
    r.curve.emplace_back(r.steps, loss_value);
    losses.push_back(loss_value);
    if (r.steps % opt.eval_every == 0 || r.steps == total) {
      const Evaluation ev = evaluate();
      r.accuracy = ev.accuracy;
      nlohmann::json entry = {{"step", r.steps}, {"loss", running / double(since)}, {"heldout_exact_match", r.accuracy}};
      for (auto it = ev.extra.begin(); it != ev.extra.end(); ++it) entry[it.key()] = it.value();
      r.history.push_back(std::move(entry));
      r.accuracies.emplace_back(r.steps, r.accuracy);
      running = 0, since = 0;
      save();
    }
    if (!parallel || parallel->root) progress.update(r.steps, loss_value, r.accuracy);
  }
  progress.done();
  // Only --stop-after ends the loop between evaluations (--steps and 100% accuracy end it at one).
  r.stopped = r.steps < total && r.accuracy < 1.0;
  if (r.steps > start && r.checkpoint_step != r.steps) save();
  r.seconds = elapsed();
  r.total_seconds = earlier_seconds + r.seconds;
  return r;
}

}  // namespace examples
