// Checkpoint crash safety: a process killed (SIGKILL) in the middle of save_checkpoint never
// leaves a partial checkpoint behind.
//
// The parent saves checkpoint A (a model of a few MB), then, in each trial, forks a child that
// saves versions 1, 2, 3, ... of the model over the same path in a tight loop, and SIGKILLs it.
// The child reports each completed save through a pipe, so the kill is timed from the child's
// own progress, not from the parent's clock (on a loaded machine a fork and its first save can
// take many times the save time measured beforehand): trial i waits for i % 3 completed saves,
// then kills after a random delay of 0.1-1.5 save durations (the child is almost always in the
// middle of its next save then). The file at the path must then be
// bit-exactly A or one of the child's complete versions (compared byte for byte with a
// reference file written for that version), must load, and stray temporary files left by the
// killed child must not break later loads and saves. Kills that landed mid-write are counted
// from the temporary files they leave behind ("<path>.tmp.<child pid>.<n>"); the test fails if
// none did, or if no trial left a complete child version (the timing would then not exercise
// anything); when either is missing after --trials trials, up to 4 x --trials more are run.
//
// Usage: crash_save [--trials N] [--dir DIR] [--seed S]     exit 0 on success, 1 on failure.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "xgrad/models/checkpoint.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
namespace fs = std::filesystem;

namespace {

// Four float32 matrices of 256 x 1024: 4 MiB of parameters.
struct Big : Module {
  Tensor a, b, c, d;
  Big() {
    Rng rng(123);
    a = randn({256, 1024}, rng);
    b = randn({256, 1024}, rng);
    c = randn({256, 1024}, rng);
    d = randn({256, 1024}, rng);
    register_parameter("a", &a);
    register_parameter("b", &b);
    register_parameter("c", &c);
    register_parameter("d", &d);
  }
};

// Version k of the parameters: base + k (k = 0 is checkpoint A).
void set_version(Big& m, const std::vector<std::vector<float>>& base, long k) {
  auto slots = m.parameter_slots();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    float* p = slots[i].second->mutable_data<float>();
    for (std::size_t j = 0; j < base[i].size(); ++j) p[j] = base[i][j] + float(k);
  }
}

long g_saves = 0;  // saves started by this process

void save_version(const std::string& path, Big& m, const std::vector<std::vector<float>>& base, long k) {
  set_version(m, base, k);
  ++g_saves;
  save_checkpoint(path, m, nullptr, {{"version", std::to_string(k)}, {"writer", k == 0 ? "A" : "child"}});
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> temp_files(const fs::path& dir, const std::string& target_name) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(target_name + ".tmp.", 0) == 0) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 20;
  std::uint64_t seed = 2024;
  std::string parent_dir = ".";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trials" && i + 1 < argc) trials = std::stoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else if (a == "--dir" && i + 1 < argc) parent_dir = argv[++i];
    else {
      std::cerr << "crash_save: unknown argument '" << a << "' (usage: crash_save [--trials N] [--dir DIR] [--seed S])\n";
      return 2;
    }
  }
  set_num_threads(1);

  std::string tmpl = (fs::path(parent_dir) / "xgrad_crash_save_XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    std::perror("crash_save: mkdtemp");
    return 1;
  }
  const fs::path dir = tmpl;
  const std::string name = "ckpt.safetensors";
  const std::string path = (dir / name).string();
  const std::string refdir = (dir / "ref").string();
  fs::create_directory(refdir);
  int failures = 0;
  auto fail = [&](const std::string& msg) {
    std::cerr << "FAIL: " << msg << "\n";
    ++failures;
  };

  try {
    Big model;
    std::vector<std::vector<float>> base;
    for (auto& [n, t] : model.named_parameters()) {
      const float* p = t.data<float>();
      base.emplace_back(p, p + t.numel());
    }

    // Reference bytes of version k, written once to a separate directory.
    std::map<long, std::string> refs;
    auto ref = [&](long k) -> const std::string& {
      auto it = refs.find(k);
      if (it != refs.end()) return it->second;
      const std::string p = refdir + "/v" + std::to_string(k);
      save_version(p, model, base, k);
      return refs[k] = read_bytes(p);
    };
    const std::string A = ref(0);

    // How long one save takes (the child's loop is almost all saves).
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const int timing_saves = 5;
    for (int i = 0; i < timing_saves; ++i) save_version(path, model, base, 0);
    const double save_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count() / timing_saves;

    Rng rng(seed);
    int mid_write = 0, was_a = 0, was_child = 0, run = 0;
    long max_version = 0;
    std::vector<double> delays;
    const int max_trials = 5 * trials;
    for (int trial = 0; trial < max_trials && (trial < trials || mid_write == 0 || was_child == 0); ++trial) {
      ++run;
      save_version(path, model, base, 0);  // the file holds A before each trial
      if (read_bytes(path) != A) fail("trial " + std::to_string(trial) + ": could not re-save A");
      int progress[2];
      if (::pipe(progress) != 0) {
        std::perror("crash_save: pipe");
        return 1;
      }
      std::cout.flush();
      std::cerr.flush();
      const pid_t child = ::fork();
      if (child < 0) {
        std::perror("crash_save: fork");
        return 1;
      }
      if (child == 0) {
        // Child: save versions 1, 2, 3, ... until killed; one byte on the pipe after each.
        ::close(progress[0]);
        try {
          for (long k = 1;; ++k) {
            save_version(path, model, base, k);
            const char done = 1;
            if (::write(progress[1], &done, 1) != 1) break;
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "crash_save child: %s\n", e.what());
        }
        ::_exit(3);
      }
      ::close(progress[1]);
      // Wait for trial % 3 completed saves (at most 60 s each), then a random part of a save.
      const int wait_for = trial % 3;
      bool stalled = false;
      for (int done = 0; done < wait_for && !stalled; ++done) {
        pollfd pfd{progress[0], POLLIN, 0};
        char byte;
        stalled = ::poll(&pfd, 1, 60000) != 1 || ::read(progress[0], &byte, 1) != 1;
      }
      const double delay_ms = save_ms * rng.uniform(0.1, 1.5);
      delays.push_back(delay_ms);
      std::this_thread::sleep_for(std::chrono::microseconds(long(delay_ms * 1000)));
      ::kill(child, SIGKILL);
      int status = 0;
      ::waitpid(child, &status, 0);
      ::close(progress[0]);  // only now: a write to a closed pipe would end the child by SIGPIPE
      if (stalled) fail("trial " + std::to_string(trial) + ": the child completed no save within 60 s");
      const std::string t = "trial " + std::to_string(trial) + " (killed " + std::to_string(delay_ms) + " ms after " +
                            std::to_string(wait_for) + " completed saves): ";
      if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
        fail(t + "the child was not killed by SIGKILL (it exited early; status " + std::to_string(status) + ")");

      // Stray temporary files of this child mean the kill landed between open and rename.
      const auto after = temp_files(dir, name);
      const std::string prefix = name + ".tmp." + std::to_string(child) + ".";
      int strays = 0;
      for (const auto& f : after)
        if (f.rfind(prefix, 0) == 0) ++strays;
      if (strays > 1) fail(t + "the child left " + std::to_string(strays) + " temporary files (one save at a time)");
      mid_write += strays > 0;

      // The file must be A or one complete child version, byte for byte, and load.
      const std::string bytes = read_bytes(path);
      if (bytes == A) {
        ++was_a;
      } else {
        long k = -1;
        try {
          SafetensorsFile f = load_safetensors(path);
          k = std::stol(f.metadata.at("version"));
        } catch (const std::exception& e) {
          fail(t + "the checkpoint is neither A nor loadable: " + e.what());
        }
        if (k >= 1) {
          if (bytes != ref(k)) fail(t + "the checkpoint claims version " + std::to_string(k) + " but differs from it");
          else ++was_child, max_version = std::max(max_version, k);
        } else if (k == 0) {
          fail(t + "the checkpoint claims version 0 but differs from A");
        }
      }
      try {
        Big loaded;
        load_checkpoint(path, loaded);
      } catch (const std::exception& e) {
        fail(t + "load_checkpoint failed: " + e.what());
      }
    }

    // Stray temporary files (left in place, plus fake ones named as this process's next 40
    // temporary files would be: "<path>.tmp.<pid>.<n-th save>", per checkpoint.cpp) must not
    // break later saves and loads.
    const auto strays = temp_files(dir, name);
    for (long i = g_saves; i < g_saves + 40; ++i)
      std::ofstream(path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(i)) << "stray";
    save_version(path, model, base, 777);
    if (read_bytes(path) != ref(777)) fail("a save with stray temporary files present wrote something else");
    Big loaded;
    load_checkpoint(path, loaded);
    for (auto& [n, t] : loaded.named_parameters()) {
      const float* p = t.data<float>();
      const auto& b = base[n[0] - 'a'];
      for (std::size_t j = 0; j < b.size(); ++j)
        if (p[j] != b[j] + 777.0f) {
          fail("after the save next to stray files, parameter '" + n + "' differs at " + std::to_string(j));
          break;
        }
    }
    if (temp_files(dir, name).size() != strays.size() + 40)
      fail("the save next to stray files left a temporary file of its own or removed a stray");

    if (mid_write == 0) fail("no kill landed in the middle of a save (no temporary file was left behind)");
    if (was_child == 0) fail("no trial left a complete child version behind (replacement not exercised)");

    std::sort(delays.begin(), delays.end());
    std::printf(
        "checkpoint_crash_safety: %d trials, save of %.1f MB takes %.1f ms, kills %.1f-%.1f ms after 0-2 completed saves; "
        "%d kills landed mid-write (temp file left behind); file was A in %d, a complete child version in %d "
        "(up to v%ld), partial/corrupt in %d; %zu stray temp files, later save+load ok: %s\n",
        run, double(A.size()) / 1e6, save_ms, delays.front(), delays.back(), mid_write, was_a, was_child,
        max_version, run - was_a - was_child, strays.size(), failures == 0 ? "yes" : "NO");
  } catch (const std::exception& e) {
    fail(std::string("unexpected exception: ") + e.what());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return failures == 0 ? 0 : 1;
}
