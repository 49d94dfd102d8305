// Checks what a short example run wrote:
//   check_outputs run DIR [--no-plots]   metrics.json parses, evaluation losses decrease,
//                                        PNGs are PNGs, the checkpoint loads
//   check_outputs same CKPT_A CKPT_B      two checkpoints hold bit-identical tensors
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <iostream>

#include <xgrad/xgrad.hpp>

static int fail(const std::string& msg) {
  std::cerr << "check_outputs: " << msg << "\n";
  return 1;
}

static bool is_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  return f && std::memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return fail("usage: check_outputs run DIR | same A B");
  const std::string mode = argv[1];
  try {
    if (mode == "same" && argc == 4) {
      auto a = xgrad::load_safetensors(argv[2]).tensors, b = xgrad::load_safetensors(argv[3]).tensors;
      if (a.size() != b.size()) return fail("different tensor counts");
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape())
          return fail("tensor " + a[i].first + " differs in name or shape");
        if (a[i].second.to_vector() != b[i].second.to_vector()) return fail("tensor " + a[i].first + " differs");
      }
      std::cout << "checkpoints identical (" << a.size() << " tensors)\n";
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
    for (const char* key : {"config", "final_heldout_exact_match", "steps", "wall_time_seconds"})
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
