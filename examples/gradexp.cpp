// gradexp: gradient experiments on a trained model.
//   1. per-layer gradient norms;
//   2. a Hessian-vector product through create_graph, checked against central finite
//      differences of the gradient: Hv ~ (grad L(w + eps v) - grad L(w - eps v)) / 2 eps;
//   3. the top Hessian eigenvalue by power iteration on Hv.
// The model (a small causal decoder) is first trained for --steps on a toy task — predict
// the token two positions back — then converted to float64 for the experiments.
#include <tuple>

#include "common.hpp"

using namespace xgrad;

namespace {

// tokens (B, T) random; targets[t] = tokens[t - 2] (ignored for t < 2).
std::pair<Tensor, Tensor> batch(Rng& rng, std::size_t B, std::size_t T, std::int64_t V) {
  std::vector<std::int64_t> x(B * T), y(B * T, -100);
  for (auto& v : x) v = rng.uniform_int(0, V - 1);
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t t = 2; t < T; ++t) y[i * T + t] = x[i * T + t - 2];
  return {index_tensor(x, {B, T}), index_tensor(y, {B, T})};
}

double dot(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto va = a[i].to_vector(), vb = b[i].to_vector();
    for (std::size_t j = 0; j < va.size(); ++j) s += va[j] * vb[j];
  }
  return s;
}

std::vector<Tensor> scaled(const std::vector<Tensor>& a, double c) {
  std::vector<Tensor> out;
  for (const auto& t : a) out.push_back(mul_scalar(t, c).detach());
  return out;
}

// Adds c * v to the parameters in place.
void shift(Module& model, const std::vector<Tensor>& v, double c) {
  auto slots = model.parameter_slots();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    double* p = slots[i].second->mutable_data<double>();
    const double* d = v[i].data<double>();
    for (std::size_t j = 0; j < v[i].numel(); ++j) p[j] += c * d[j];
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradexp: per-layer gradient norms, a Hessian-vector product and the top Hessian eigenvalue"};
  examples::CommonOptions opt;
  opt.steps = 300;
  examples::RunConfig run("gradexp");
  int power_iterations = 20;
  examples::add_common_options(app, opt, run);
  app.add_option("--power-iterations", power_iterations,
                 "power-iteration steps for the top eigenvalue (after training: free on --resume)")
      ->capture_default_str()
      ->transform(examples::whole_number(1, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    if (examples::resolve_resume(opt, run)) return 0;
    examples::setup_runtime(opt);
    std::filesystem::create_directories(opt.out);
    const std::int64_t V = 8;
    const std::size_t T = 12;
    TransformerConfig cfg;
    cfg.vocab_size = std::size_t(V), cfg.max_len = T, cfg.embed_dim = 16, cfg.num_heads = 2;
    cfg.ff_hidden = 32, cfg.num_layers = 2, cfg.seed = opt.seed;
    TransformerDecoder model(cfg);

    // Train (float32).
    AdamW optimizer(model.named_parameters(), 3e-3);
    auto loss_at = [&](long step) {
      Rng rng(opt.seed * 1000003 + std::uint64_t(step));
      auto [x, y] = batch(rng, 32, T, V);
      return cross_entropy(model.forward(x), y);
    };
    Rng eval_rng(opt.seed + 99);
    Tensor ex, ey;  // not a structured binding: C++17 lambdas cannot capture those (clang)
    std::tie(ex, ey) = batch(eval_rng, 256, T, V);
    auto accuracy = [&] {
      NoGradGuard no_grad;
      auto lv = model.forward(ex).to_vector();
      std::size_t ok = 0, n = 0;
      for (std::size_t i = 0; i < ey.numel(); ++i) {
        const auto t = ey.data<std::int64_t>()[i];
        if (t < 0) continue;
        const double* row = lv.data() + i * std::size_t(V);
        ok += std::max_element(row, row + V) - row == t;
        ++n;
      }
      return double(ok) / double(n);
    };
    auto result = examples::train(opt, run, opt.steps, 3e-3, model, optimizer, loss_at, accuracy);
    std::cout << "trained " << result.steps << " steps: token accuracy " << 100 * result.accuracy << "%"
              << examples::evaluated_at(result) << ", " << examples::seconds_text(result) << "\n";

    // Experiments in float64 on one fixed batch.
    model.to(DType::Float64);
    model.eval();
    Rng rng(opt.seed + 5);
    Tensor x, y;
    std::tie(x, y) = batch(rng, 16, T, V);
    auto params = model.parameters();
    auto names = model.named_parameters();
    auto loss_fn = [&] { return cross_entropy(model.forward(x), y); };

    // 1. Per-layer gradient norms (grouped by module: the name without its last part).
    auto g = grad({loss_fn()}, params);
    std::vector<std::pair<std::string, double>> layer_sq;
    for (std::size_t i = 0; i < g.size(); ++i) {
      std::string layer = names[i].first.substr(0, names[i].first.rfind('.'));
      double sq = dot({g[i]}, {g[i]});
      if (layer_sq.empty() || layer_sq.back().first != layer) layer_sq.emplace_back(layer, 0.0);
      layer_sq.back().second += sq;
    }
    nlohmann::json norms = nlohmann::json::object();
    std::cout << "per-layer gradient norms:\n";
    for (auto& [layer, sq] : layer_sq) {
      norms[layer] = std::sqrt(sq);
      std::printf("  %-28s %.3e\n", layer.c_str(), std::sqrt(sq));
    }

    // 2. Hessian-vector product vs finite differences of the gradient.
    auto hvp = [&](const std::vector<Tensor>& v) {
      auto gs = grad({loss_fn()}, params, {}, GradOptions{false, true, false});
      Tensor gv = scalar(0.0, DType::Float64);
      for (std::size_t i = 0; i < gs.size(); ++i) gv = add(gv, sum(mul(gs[i], v[i])));
      return grad({gv}, params, {}, GradOptions{false, false, true});
    };
    std::vector<Tensor> v;
    for (const auto& p : params) v.push_back(randn(p.shape(), rng, DType::Float64));
    v = scaled(v, 1.0 / std::sqrt(dot(v, v)));
    auto hv = hvp(v);
    for (auto& t : hv)
      if (!t.defined()) throw GraphError("gradexp: a parameter has no second derivative");
    const double eps = 1e-4;
    shift(model, v, eps);
    auto g_plus = grad({loss_fn()}, model.parameters());
    shift(model, v, -2 * eps);
    auto g_minus = grad({loss_fn()}, model.parameters());
    shift(model, v, eps);
    std::vector<Tensor> fd;
    for (std::size_t i = 0; i < g_plus.size(); ++i) fd.push_back(mul_scalar(sub(g_plus[i], g_minus[i]), 0.5 / eps));
    std::vector<Tensor> diff;
    for (std::size_t i = 0; i < fd.size(); ++i) diff.push_back(sub(hv[i], fd[i]));
    const double rel = std::sqrt(dot(diff, diff) / dot(hv, hv));
    std::cout << "Hessian-vector product: ||Hv|| = " << std::sqrt(dot(hv, hv))
              << ", relative difference to finite differences = " << rel << "\n";

    // 3. Top eigenvalue (largest magnitude) by power iteration.
    double lambda = 0;
    std::vector<double> trace;
    for (int it = 0; it < power_iterations; ++it) {
      auto h = hvp(v);
      lambda = dot(v, h);
      trace.push_back(lambda);
      v = scaled(h, 1.0 / std::sqrt(dot(h, h)));
    }
    std::cout << "top Hessian eigenvalue (power iteration, " << power_iterations << " steps): " << lambda << "\n";

    examples::write_metrics(opt.out + "/metrics.json",
                         {{"example", "gradexp"}, {"steps", result.steps}, {"token_accuracy", result.accuracy},
                          {"layer_grad_norms", norms}, {"hvp_relative_fd_difference", rel},
                          {"top_eigenvalue", lambda}, {"power_iteration_trace", trace},
                          {"wall_time_seconds_total", result.total_seconds},
                          {"wall_time_seconds_this_run", result.seconds}});
    examples::Plots plots(!opt.no_plots);
    {
      const std::string png = opt.out + "/grad_norms.png";
      std::string s = "set terminal pngcairo size 900,500 noenhanced\nset output " + examples::gp_quote(png) +
                      "\nset style fill solid\nset boxwidth 0.7\nset logscale y\n"
                      "set xtics rotate by -45 font ',8'\nset ylabel 'gradient norm'\nset title 'per-layer gradient norms'\n"
                      "plot '-' using 0:2:xtic(1) with boxes notitle\n";
      for (auto& [layer, sq] : layer_sq) s += "\"" + layer + "\" " + std::to_string(std::sqrt(sq)) + "\n";
      s += "e\n";
      plots.draw(png, s);
    }
    std::cout << examples::outputs_line(opt.out, plots.written(), result) << "\n";
    std::cout << "ran on: " << runtime_summary() << "\n";
    return rel < 1e-4 && plots.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "gradexp: error: " << e.what() << "\n";
    return 2;
  }
}
