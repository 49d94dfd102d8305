// Checks what a short example run wrote:
//   check_outputs run DIR [--no-plots]   metrics.json parses, evaluation losses decrease,
//                                        PNGs are PNGs, the checkpoint loads
//   check_outputs same CKPT_A CKPT_B      two checkpoints hold bit-identical tensors
//   check_outputs same-run DIR_A DIR_B    two runs (uninterrupted and resumed) are the
//                                        same: checkpoint tensors, the checkpoint metadata
//                                        (run_config, history, per-step losses), metrics.json
//                                        but wall times, threads and runtime, loss.png bytes;
//                                        B's total wall time exceeds its own run's
//   check_outputs gradexp DIR             gradexp's measurements: every figure finite, the
//                                        training loss decreases, eigenvalues descending and
//                                        >= every probe's Rayleigh quotient and tr(H)/n, the
//                                        per-sample gradients without a per-example loop, the
//                                        final checks (hvp, vhp, jvp, Lanczos vs power)
#include <nlohmann/json.hpp>

#include <cmath>
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


// Every number in j finite; null allowed only where the path `where` contains "b_simple"
// (gradexp's noise_scale.b_simple, written as null when not finite).
static bool all_finite(const nlohmann::json& j, const std::string& where, std::string& why) {
  if (j.is_number()) return std::isfinite(j.get<double>()) || (why = where + " is not finite", false);
  if (j.is_null()) return where.find("b_simple") != std::string::npos || (why = where + " is null", false);
  if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i)
      if (!all_finite(j[i], where + "[" + std::to_string(i) + "]", why)) return false;
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!all_finite(it.value(), where + "." + it.key(), why)) return false;
  }
  return true;
}

static int check_gradexp(const std::string& dir) {
  const auto m = nlohmann::json::parse(file_bytes(dir + "/metrics.json"));
  const auto& ms = m.at("measurements");
  if (ms.size() < 2) return fail("fewer than two measurements in metrics.json");
  std::string why;
  if (!all_finite(ms, "measurements", why) || !all_finite(m.at("checks"), "checks", why)) return fail(why);
  const double first = ms.front().at("train_loss"), last = ms.back().at("train_loss");
  if (!(last < first)) return fail("training loss did not decrease: " + std::to_string(first) + " -> " + std::to_string(last));
  for (const auto& e : ms) {
    const std::string at = "step " + std::to_string(e.at("step").get<long>()) + ": ";
    const auto& eig = e.at("hessian_top_eigenvalues");
    const double n = e.at("parameters"), top = eig.at(0);
    for (std::size_t i = 1; i < eig.size(); ++i)
      if (eig[i].get<double>() > eig[i - 1].get<double>()) return fail(at + "eigenvalues not descending");
    // lambda_max >= v^T H v / |v|^2 for every v, and >= tr(H) / n (the mean eigenvalue).
    if (!(top >= e.at("max_probe_rayleigh_quotient").get<double>()))
      return fail(at + "lambda_max " + std::to_string(top) + " < a probe's Rayleigh quotient");
    if (!(top >= e.at("hessian_trace").get<double>() / n)) return fail(at + "lambda_max < tr(H) / n");
    if (std::abs(e.at("two_over_lr").get<double>() * e.at("lr").get<double>() - 2) > 1e-9) return fail(at + "2/lr is not 2/lr");
    for (auto it = e.at("per_sample_methods").begin(); it != e.at("per_sample_methods").end(); ++it)
      if (it.key() != "linear" && it.key() != "broadcast")
        return fail(at + std::to_string(it.value().get<int>()) + " parameters took per_sample_gradients' '" + it.key() +
                    "' method (a per-example loop)");
    if (e.at("noise_scale").at("batch").get<long>() != m.at("config").at("train_size").get<long>())
      return fail(at + "the noise scale is not from every training image");
  }
  const auto& c = m.at("checks");
  if (!(c.at("hvp_vs_finite_differences").get<double>() < 1e-4 && c.at("vhp_vs_hvp").get<double>() < 1e-8 &&
        c.at("jvp_vs_grad_dot_v").get<double>() < 1e-8 && c.at("power_vs_lanczos").get<double>() < 1e-3))
    return fail("a final check is out of tolerance: " + c.dump());
  auto ckpt = xgrad::load_safetensors(dir + "/checkpoint.safetensors");
  if (ckpt.tensors.empty()) return fail("empty checkpoint");
  std::cout << dir << ": training loss " << first << " -> " << last << ", lambda_max " << ms.back().at("hessian_top_eigenvalues")[0]
            << ", " << ms.size() << " measurements ok\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return fail("usage: check_outputs run DIR | same A B | same-run DIR_A DIR_B | gradexp DIR");
  const std::string mode = argv[1];
  try {
    if (mode == "gradexp" && argc == 3) return check_gradexp(argv[2]);
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
