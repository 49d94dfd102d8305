// Checks what a short example run wrote:
//   check_outputs run DIR [--no-plots]   metrics.json parses, evaluation losses decrease,
//                                        PNGs are PNGs, the checkpoint loads
//   check_outputs same CKPT_A CKPT_B      two checkpoints hold bit-identical tensors
//   check_outputs same-run DIR_A DIR_B    two runs (uninterrupted and resumed) are the
//                                        same: checkpoint tensors, the checkpoint metadata
//                                        (run_config, history, per-step losses), metrics.json
//                                        but wall times, threads and runtime, loss.png bytes;
//                                        B's total wall time exceeds its own run's
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <iostream>

#include <xgrad/xgrad.hpp>

static int fail(const std::string& msg) {
  std::cerr << "check_outputs: " << msg << "\n";
  return 1;
}

static std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

static bool same_tensors(const xgrad::NamedTensors& a, const xgrad::NamedTensors& b, std::string& why) {
  if (a.size() != b.size()) return why = "different tensor counts", false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape())
      return why = "tensor " + a[i].first + " differs in name or shape", false;
    if (a[i].second.to_vector() != b[i].second.to_vector()) return why = "tensor " + a[i].first + " differs", false;
  }
  return true;
}

static bool is_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  return f && std::memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return fail("usage: check_outputs run DIR | same A B | same-run DIR_A DIR_B");
  const std::string mode = argv[1];
  try {
    if (mode == "same" && argc == 4) {
      auto a = xgrad::load_safetensors(argv[2]).tensors, b = xgrad::load_safetensors(argv[3]).tensors;
      std::string why;
      if (!same_tensors(a, b, why)) return fail(why);
      std::cout << "checkpoints identical (" << a.size() << " tensors)\n";
      return 0;
    }
    if (mode == "same-run" && argc == 4) {
      const std::string da = argv[2], db = argv[3];
      auto a = xgrad::load_safetensors(da + "/checkpoint.safetensors");
      auto b = xgrad::load_safetensors(db + "/checkpoint.safetensors");
      std::string why;
      if (!same_tensors(a.tensors, b.tensors, why)) return fail(why);
      for (const char* key : {"step", "example", "run_config", "history", "losses"})
        if (!a.metadata.count(key) || a.metadata[key] != b.metadata[key])
          return fail(std::string("checkpoint metadata '") + key + "' missing or different");
      auto ma = nlohmann::json::parse(file_bytes(da + "/metrics.json"));
      auto mb = nlohmann::json::parse(file_bytes(db + "/metrics.json"));
      // B resumed A's run: its total training time includes the runs before the resume.
      if (!(mb.at("wall_time_seconds_total").get<double>() > mb.at("wall_time_seconds_this_run").get<double>()))
        return fail(db + "/metrics.json: wall_time_seconds_total is not more than wall_time_seconds_this_run");
      for (auto* m : {&ma, &mb}) {
        m->erase("wall_time_seconds_total"), m->erase("wall_time_seconds_this_run"), m->erase("runtime");
        if (m->contains("config")) (*m)["config"].erase("threads");
      }
      if (ma != mb) return fail("metrics.json differ beyond wall time, threads and runtime");
      if (file_bytes(da + "/loss.png") != file_bytes(db + "/loss.png")) return fail("loss.png differ");
      std::cout << da << " and " << db << ": same run (checkpoint, per-step losses, metrics, loss.png)\n";
      return 0;
    }
    const std::string dir = argv[2];
    const bool plots = !(argc > 3 && std::string(argv[3]) == "--no-plots");
    std::ifstream mf(dir + "/metrics.json");
    if (!mf) return fail("no " + dir + "/metrics.json");
    nlohmann::json m = nlohmann::json::parse(mf);
    auto ev = m.at("evaluations");
    if (ev.size() < 2) return fail("fewer than two evaluations in metrics.json");
    const double first = ev.front().at("loss"), last = ev.back().at("loss");
    if (!(last < first)) return fail("loss did not decrease: " + std::to_string(first) + " -> " + std::to_string(last));
    for (const char* key :
         {"config", "final_heldout_exact_match", "steps", "wall_time_seconds_total", "wall_time_seconds_this_run"})
      if (!m.contains(key)) return fail(std::string("metrics.json lacks ") + key);
    if (plots)
      for (const char* png : {"/loss.png", "/attention.png"})
        if (!is_png(dir + png)) return fail(dir + png + " is missing or not a PNG");
    auto ckpt = xgrad::load_safetensors(dir + "/checkpoint.safetensors");
    if (ckpt.tensors.empty()) return fail("empty checkpoint");
    std::cout << dir << ": loss " << first << " -> " << last << ", " << ckpt.tensors.size()
              << " checkpoint tensors, outputs ok\n";
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
