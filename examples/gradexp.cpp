// gradexp: gradient experiments on a real model with xgrad's toolkit (framework/functional.hpp,
// framework/curvature.hpp, framework/graph_dot.hpp).
//
// The model is fashion_vit's Vision Transformer (examples/vit_model.hpp), smaller, on a fixed
// subset of the Fashion-MNIST training images (Debian's dataset-fashion-mnist), trained by
// full-batch gradient descent (SGD without momentum and, by default, without gradient clipping,
// every step on the whole subset: the threshold 2/lr is then exact for a quadratic), so that
// the training loss L(w) = mean_i loss_i(w) and its Hessian are one function at every step.
// At every evaluation (--eval-every), on that training set, in float64 (a copy of the model):
//   - per-layer gradient norms;
//   - the top --eigenvalues Hessian eigenvalues (Lanczos on a HessianOperator) against 2/lr,
//     gradient descent's stability threshold: the "edge of stability" curve (Cohen et al.
//     2021: the sharpness rises until it meets 2/lr and then hovers there);
//   - the Hessian trace (Hutchinson, --hutchinson-samples Rademacher probes);
//   - the gradient-noise scale B_simple = tr(Sigma) / |G|^2 from the per-sample gradients of
//     every training image (McCandlish et al. 2018; per_sample_gradients: one batched GEMM per
//     linear layer, the broadcast parameters split per example, no per-example loop).
// The held-out figure is the accuracy on the first --test-size test images.
// After training: hvp against vhp and finite differences of the gradient, jvp against
// <grad L, v>, the largest-magnitude eigenvalue by Lanczos against plain power iteration, and
// the recorded graph of one MultiHeadAttention forward (the first block's) and of its
// create_graph backward as DOT files (and SVG, drawn by Graphviz's dot).
//
// The measurements of every evaluation go to <out>/measurements.json before the checkpoint of
// that step is written, so a --resume continues them: the resumed run's metrics.json is the
// uninterrupted run's.
#include <tuple>

#include "common.hpp"
#include "vit_options.hpp"

using namespace xgrad;

namespace {

using examples::ImageBatch;
using examples::VisionTransformer;
using examples::VitConfig;

// --- the model and its data ----------------------------------------------------------------------

using Model = VisionTransformer;

// loss_i: image i's cross-entropy; the training loss is their mean.
Tensor per_example_losses(Model& m, const ImageBatch& b) { return cross_entropy_per_example(m.forward(b.images), b.labels); }
Tensor mean_loss(Model& m, const ImageBatch& b) { return mean(per_example_losses(m, b)); }

double accuracy(Model& m, const ImageBatch& b) {
  NoGradGuard no_grad;
  const Tensor predicted = argmax(m.forward(b.images), 1);
  const std::size_t n = b.labels.numel();
  std::size_t ok = 0;
  for (std::size_t i = 0; i < n; ++i) ok += predicted.data<std::int64_t>()[i] == b.labels.data<std::int64_t>()[i];
  return double(ok) / double(n);
}

// The first n images of (images, labels).
ImageBatch first_images(const Tensor& images, const Tensor& labels, std::size_t n) {
  std::vector<std::size_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = i;
  return examples::gather_images(images, labels, rows);
}

// --- measurements --------------------------------------------------------------------------------

struct Settings {
  std::size_t eigenvalues = 2, lanczos_iterations = 20, hutchinson_samples = 10;
  std::uint64_t seed = 0;
};

// A float64 copy of `model` (curvature in float32 would be limited by its rounding).
std::unique_ptr<Model> float64_copy(const Model& model) {
  auto copy = std::make_unique<Model>(model.cfg);
  copy->to(DType::Float64);
  copy->load_parameters(model.named_parameters());
  return copy;
}

// The module a parameter belongs to: its name without the last part (pos_embed, cls_token: itself).
std::string layer_of(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// train64: the training images in float64 (the probe's dtype).
nlohmann::json measure(const Model& model, const ImageBatch& train64, long step, double lr, const Settings& s) {
  auto probe = float64_copy(model);
  Model& m = *probe;
  // The per-sample gradients (B x the parameters) first, freed before H keeps its graphs.
  std::map<std::string, std::size_t> methods;
  NoiseScale noise;
  {
    const PerSampleGradients ps = per_sample_gradients(m, [&] { return per_example_losses(m, train64); });
    for (const auto& how : ps.methods) ++methods[how];
    noise = gradient_noise_scale(ps.grads);
  }
  const TensorFn loss_fn = parameter_function(m, [&] { return mean_loss(m, train64); });
  const HessianOperator H(loss_fn, m.parameters());
  nlohmann::json layers = nlohmann::json::object();
  double total = 0;
  {
    const NamedTensors names = m.named_parameters();
    std::map<std::string, double> sq;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto g = H.gradient()[i].to_vector();
      double s2 = 0;
      for (double v : g) s2 += v * v;
      sq[layer_of(names[i].first)] += s2;
      total += s2;
    }
    for (const auto& kv : sq) layers[kv.first] = std::sqrt(kv.second);
  }
  LanczosOptions lo;
  lo.k = s.eigenvalues, lo.max_iterations = s.lanczos_iterations, lo.tol = 1e-3, lo.seed = s.seed;
  const LanczosResult top = lanczos(H, H.inputs(), lo);
  HutchinsonOptions ho;
  ho.samples = s.hutchinson_samples, ho.seed = s.seed + 1;
  const TraceEstimate trace = hutchinson_trace(H, H.inputs(), ho);
  // A probe v of +-1 entries has |v|^2 = n: v^T H v / n is a Rayleigh quotient, <= lambda_max.
  const double n = double(m.parameter_count());
  const double rayleigh = *std::max_element(trace.values.begin(), trace.values.end()) / n;
  return {{"step", step},
          {"lr", lr},
          {"two_over_lr", lr > 0 ? nlohmann::json(2 / lr) : nlohmann::json(nullptr)},
          {"train_loss", H.value().item()},
          {"grad_norm", std::sqrt(total)},
          {"layer_grad_norms", layers},
          {"hessian_top_eigenvalues", top.eigenvalues},
          {"lanczos_residuals", top.residuals},
          {"lanczos_products", top.iterations},
          {"lanczos_converged", top.converged},
          {"hessian_trace", trace.trace},
          {"hessian_trace_std_error", finite_or_null(trace.std_error)},
          {"max_probe_rayleigh_quotient", rayleigh},
          {"parameters", m.parameter_count()},
          {"per_sample_methods", methods},
          {"noise_scale", {{"b_simple", finite_or_null(noise.b_simple)}, {"trace_sigma", noise.trace_sigma},
                           {"grad_sq_norm", noise.grad_sq_norm}, {"batch", noise.batch}}}};
}

// <out>/measurements.json: {"example": "gradexp", "measurements": [{step, ...}, ...]}.
std::map<long, nlohmann::json> read_measurements(const std::string& path) {
  std::map<long, nlohmann::json> out;
  std::ifstream f(path);
  if (!f) throw IOError("--resume: " + path + " is missing: the measurements of the earlier evaluations are lost");
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    if (j.at("example") != "gradexp") throw IOError("--resume: " + path + " was not written by gradexp");
    for (const auto& m : j.at("measurements")) out[m.at("step").get<long>()] = m;
  } catch (const nlohmann::json::exception& e) {
    throw IOError("--resume: " + path + " is not a gradexp measurements file (" + e.what() + ")");
  }
  return out;
}

void write_measurements(const std::string& path, const std::map<long, nlohmann::json>& ms) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& kv : ms) list.push_back(kv.second);
  examples::write_json(path, {{"example", "gradexp"}, {"measurements", list}});
}

// --- pictures ------------------------------------------------------------------------------------

std::string series(const std::vector<std::pair<double, double>>& pts) {
  std::string s;
  char num[64];
  for (const auto& p : pts) {
    std::snprintf(num, sizeof num, "%.9g %.9g\n", p.first, p.second);
    s += num;
  }
  return s + "e\n";
}

std::string header(const std::string& png, const std::string& title) {
  return "set terminal pngcairo size 900,500 noenhanced\nset output " + examples::gp_quote(png) +
         "\nset grid\nset key outside right top\nset xlabel 'step'\nset title " + examples::gp_quote(title) + "\n";
}

// Sharpness (top eigenvalues) at the evaluations and 2/lr at every step.
std::string sharpness_script(const std::string& png, const std::vector<nlohmann::json>& ms,
                             const std::vector<std::pair<double, double>>& two_over_lr, std::size_t k) {
  std::string s = header(png, "edge of stability: top Hessian eigenvalues of the training loss vs 2/lr") +
                  "set ylabel 'eigenvalue'\nset logscale y\nplot '-' with lines lw 2 lc rgb '#c62828' title '2 / lr'";
  std::vector<std::vector<std::pair<double, double>>> eig(k);
  for (const auto& m : ms)
    for (std::size_t i = 0; i < k && i < m["hessian_top_eigenvalues"].size(); ++i) {
      const double v = m["hessian_top_eigenvalues"][i];
      if (v > 0) eig[i].emplace_back(m["step"].get<double>(), v);
    }
  for (std::size_t i = 0; i < k; ++i) s += ", '-' with linespoints pt 7 title 'lambda_" + std::to_string(i + 1) + "'";
  s += "\n" + series(two_over_lr);
  for (const auto& e : eig) s += series(e);
  return s;
}

std::string grad_norms_script(const std::string& png, const std::vector<nlohmann::json>& ms) {
  std::vector<std::string> layers;
  for (auto it = ms.front()["layer_grad_norms"].begin(); it != ms.front()["layer_grad_norms"].end(); ++it)
    layers.push_back(it.key());
  std::string s = header(png, "per-layer gradient norms of the training loss") +
                  "set ylabel 'gradient norm'\nset logscale y\nset key font ',7'\nplot ";
  for (std::size_t i = 0; i < layers.size(); ++i)
    s += std::string(i ? ", " : "") + "'-' with linespoints title " + examples::gp_quote(layers[i]);
  s += "\n";
  for (const auto& layer : layers) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& m : ms) pts.emplace_back(m["step"].get<double>(), m["layer_grad_norms"][layer].get<double>());
    s += series(pts);
  }
  return s;
}

// B_simple is drawn where it is finite: where the |G|^2 estimate is <= 0 (near a minimum of a
// full-batch loss the mean gradient vanishes but not the per-example ones) it is infinite.
std::string trace_noise_script(const std::string& png, const std::vector<nlohmann::json>& ms) {
  std::vector<std::pair<double, double>> b;
  for (const auto& m : ms)
    if (!m["noise_scale"]["b_simple"].is_null()) b.emplace_back(m["step"].get<double>(), m["noise_scale"]["b_simple"].get<double>());
  std::string s = header(png, "Hessian trace (Hutchinson, +- 1 standard error) and gradient-noise scale B_simple") +
                  "set ylabel 'trace'\nset y2label 'B_simple (examples)'\nset ytics nomirror\nset y2tics\n"
                  "set key inside left top\n";
  if (b.empty()) s += "set label 1 'B_simple infinite at every evaluation (noise dominates)' at graph 0.02, graph 0.95\n";
  s += std::string("plot '-' with yerrorlines title 'tr(H)'") +
       (b.empty() ? "" : ", '-' axes x1y2 with linespoints title 'B_simple (finite points)'") + "\n";
  for (const auto& m : ms) {
    const double se = m["hessian_trace_std_error"].is_null() ? 0.0 : m["hessian_trace_std_error"].get<double>();
    char num[96];
    std::snprintf(num, sizeof num, "%.9g %.9g %.9g\n", m["step"].get<double>(), m["hessian_trace"].get<double>(), se);
    s += num;
  }
  s += "e\n";
  return b.empty() ? s : s + series(b);
}

// `dot -Tsvg in -o out`; "" on success, else what went wrong.
std::string render_svg(const std::string& dot_file, const std::string& svg_file) {
  if (std::system("command -v dot > /dev/null 2>&1") != 0)
    return "Graphviz's dot is not installed (not found on PATH; Debian: apt-get install graphviz)";
  auto q = [](const std::string& p) {
    std::string s = "'";
    for (char c : p) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return s + "'";
  };
  const int status = std::system(("dot -Tsvg " + q(dot_file) + " -o " + q(svg_file) + " 2>&1").c_str());
  if (status != 0) return "dot failed (status " + std::to_string(status) + ")";
  return "";
}

// x <- x + c v for every parameter tensor (as new tensors).
Tensors shifted(const Tensors& x, const Tensors& v, double c) {
  Tensors out;
  for (std::size_t i = 0; i < x.size(); ++i) out.push_back(add(x[i], mul_scalar(v[i], c)).detach());
  return out;
}

double norm_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

double relative_difference(const Tensors& a, const Tensors& b) {
  auto va = flatten_values(a), vb = flatten_values(b);
  for (std::size_t i = 0; i < va.size(); ++i) va[i] -= vb[i];
  return norm_of(va) / norm_of(vb);
}

// The largest-magnitude eigenvalue of H by power iteration: `products` products from a N(0, 1)
// start, the last Rayleigh quotient v^T H v (v of unit norm).
double power_iteration(const HessianOperator& H, std::size_t products, std::uint64_t seed) {
  Rng rng(seed);
  Tensors v;
  for (const auto& p : H.inputs()) v.push_back(randn(p.shape(), rng, DType::Float64));
  double estimate = 0;
  for (std::size_t it = 0; it < products; ++it) {
    std::vector<double> x = flatten_values(v);
    const double nx = norm_of(x);
    for (double& e : x) e /= nx;
    const std::vector<double> hx = flatten_values(H(unflatten_values(x, v)));
    estimate = 0;
    for (std::size_t i = 0; i < x.size(); ++i) estimate += x[i] * hx[i];
    v = unflatten_values(hx, v);
  }
  return estimate;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradexp: per-layer gradient norms, Hessian spectrum and trace (edge of stability), gradient-noise "
               "scale and graph pictures on a Vision Transformer trained on Fashion-MNIST (apt-get install "
               "dataset-fashion-mnist)"};
  examples::CommonOptions opt;
  opt.steps = 300;
  opt.eval_every = 25;
  opt.max_grad_norm = 0;
  examples::RunConfig run("gradexp");
  std::size_t train_size = 512, test_size = 1000;
  double lr = 0.5;
  std::string pool = "cls", data_dir = kFashionMnistDir;
  VitConfig cfg;
  cfg.patch = 7, cfg.dim = 32, cfg.depth = 2, cfg.heads = 2, cfg.mlp = 64;
  Settings settings;
  examples::add_common_options(app, opt, run);
  run.add(app, "--lr", lr, "peak learning rate (gradient descent, warmup + cosine)", examples::positive_number());
  run.add(app, "--clip", opt.max_grad_norm,
          "clip the gradient's norm to this (0 = never: plain gradient descent, whose stability threshold is 2/lr)",
          examples::non_negative_number());
  run.add(app, "--train-size", train_size, "training images, the first N (every step uses all of them)",
          examples::whole_number(2, 60000));
  run.add(app, "--test-size", test_size, "held-out images, the first N test images", examples::whole_number(1, 10000));
  examples::add_vit_options(app, run, cfg, pool);
  run.add(app, "--eigenvalues", settings.eigenvalues, "top Hessian eigenvalues per evaluation (Lanczos)",
          examples::whole_number(1, 100));
  run.add(app, "--lanczos-iterations", settings.lanczos_iterations, "Hessian-vector products per Lanczos run (>= --eigenvalues)",
          examples::whole_number(1, 1000));
  run.add(app, "--hutchinson-samples", settings.hutchinson_samples, "Rademacher probes per trace estimate",
          examples::whole_number(1, 10000));
  app.add_option("--data-dir", data_dir, "directory of the four IDX .gz files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (examples::resolve_resume(opt, run)) return 0;
    examples::finish_vit_options(cfg, pool);
    if (settings.lanczos_iterations < settings.eigenvalues)
      throw ValueError("--lanczos-iterations " + std::to_string(settings.lanczos_iterations) + " is less than --eigenvalues " +
                       std::to_string(settings.eigenvalues));
    cfg.seed = opt.seed;
    examples::setup_runtime(opt);
    FashionMnist data = load_fashion_mnist(data_dir);
    examples::standardise_by_training_pixels(data);
    const ImageBatch train = first_images(data.train_images, data.train_labels, train_size);
    const ImageBatch heldout = first_images(data.test_images, data.test_labels, test_size);
    const ImageBatch train64{train.images.to(DType::Float64), train.labels};
    std::filesystem::create_directories(opt.out);
    settings.seed = opt.seed;
    Model model(cfg);
    SGD optimizer(model.named_parameters(), SGDOptions(lr));  // plain gradient descent: threshold 2 / lr
    std::cout << "gradexp: " << model.parameter_count() << " parameters, " << train_size
              << " training images (full-batch gradient descent)\n";

    const std::string measurements_path = opt.out + "/measurements.json";
    std::map<long, nlohmann::json> measurements;
    if (opt.resume) measurements = read_measurements(measurements_path);
    auto evaluate = [&] {
      const long step = long(optimizer.steps());
      measurements[step] = measure(model, train64, step, optimizer.lr, settings);
      write_measurements(measurements_path, measurements);  // before train() writes this step's checkpoint
      return accuracy(model, heldout);
    };
    auto result = examples::train(opt, run, opt.steps, lr, model, optimizer, [&](long) { return mean_loss(model, train); },
                                  evaluate);
    std::vector<nlohmann::json> ms;  // one per evaluation of this run's whole history
    for (const auto& [step, acc] : result.accuracies) {
      (void)acc;
      auto it = measurements.find(step);
      if (it == measurements.end())
        throw IOError("--resume: " + measurements_path + " has no measurement of the evaluation at step " + std::to_string(step));
      ms.push_back(it->second);
    }
    for (auto it = measurements.begin(); it != measurements.end();)  // stale entries past the checkpoint
      it = it->first > result.steps ? measurements.erase(it) : std::next(it);
    write_measurements(measurements_path, measurements);
    std::cout << "trained " << result.steps << " steps (full-batch gradient descent on " << train_size
              << " images, peak lr " << lr << "): training loss "
              << (ms.empty() ? std::string("-") : std::to_string(ms.back()["train_loss"].get<double>()))
              << ", test accuracy " << 100 * result.accuracy << "%" << examples::evaluated_at(result) << " on " << test_size
              << " images, " << examples::seconds_text(result) << "\n";
    for (const auto& m : ms)
      std::printf("  step %5ld  loss %.4f  |g| %.3e  lambda_max %9.4g  2/lr %9.4g  tr(H) %9.4g  B_simple %s\n",
                  m["step"].get<long>(), m["train_loss"].get<double>(), m["grad_norm"].get<double>(),
                  m["hessian_top_eigenvalues"][0].get<double>(), m["two_over_lr"].is_null() ? 0.0 : m["two_over_lr"].get<double>(),
                  m["hessian_trace"].get<double>(), m["noise_scale"]["b_simple"].dump().c_str());

    // Checks of the toolkit at the final parameters, in float64.
    auto probe = float64_copy(model);
    Model& m = *probe;
    const TensorFn loss_fn = parameter_function(m, [&] { return mean_loss(m, train64); });
    const Tensors params = m.parameters();
    Rng vrng(opt.seed + 5);
    Tensors v;
    for (const auto& p : params) v.push_back(randn(p.shape(), vrng, DType::Float64));
    const double vn = norm_of(flatten_values(v));
    for (auto& t : v) t = mul_scalar(t, 1 / vn).detach();
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor value = loss_fn(params);
    const auto t1 = std::chrono::steady_clock::now();
    const JvpResult dir = jvp(loss_fn, params, v);
    const auto t2 = std::chrono::steady_clock::now();
    const HvpResult hv = hvp(loss_fn, params, v), vh = vhp(loss_fn, params, v);
    const VjpResult g = value_and_grad(loss_fn, params);
    const double eps = 1e-4;
    const Tensors gp = value_and_grad(loss_fn, shifted(params, v, eps)).grads;
    const Tensors gm = value_and_grad(loss_fn, shifted(params, v, -eps)).grads;
    Tensors fd;
    for (std::size_t i = 0; i < gp.size(); ++i) fd.push_back(mul_scalar(sub(gp[i], gm[i]), 0.5 / eps));
    double gv = 0;
    {
      const auto a = flatten_values(g.grads), b = flatten_values(v);
      for (std::size_t i = 0; i < a.size(); ++i) gv += a[i] * b[i];
    }
    const double rel_fd = relative_difference(hv.product, fd), rel_vhp = relative_difference(vh.product, hv.product);
    const double rel_jvp = std::abs(dir.tangent.item() - gv) / std::abs(gv);
    const double fwd_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double jvp_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    // The largest |eigenvalue|: Lanczos (tol 1e-6) against power iteration with as many products.
    const HessianOperator H(loss_fn, params);
    LanczosOptions lo;
    lo.k = 1, lo.max_iterations = settings.lanczos_iterations, lo.tol = 1e-6, lo.seed = opt.seed + 11;
    lo.which = SpectrumEnd::LargestMagnitude;
    const LanczosResult by_lanczos = lanczos(H, H.inputs(), lo);
    const double lanczos_top = by_lanczos.eigenvalues[0];
    const double power_top = power_iteration(H, settings.lanczos_iterations, opt.seed + 13);
    const double rel_power = std::abs(power_top - lanczos_top) / std::abs(lanczos_top);
    std::cout << "checks: |hvp - finite differences| / |hvp| = " << rel_fd << ", |vhp - hvp| / |hvp| = " << rel_vhp
              << ", |jvp - <grad, v>| / |<grad, v>| = " << rel_jvp << " (loss " << value.item() << ")\n"
              << "largest |eigenvalue| with " << settings.lanczos_iterations << " products: Lanczos " << lanczos_top
              << " (residual " << by_lanczos.residuals[0] << "), power iteration " << power_top << " (relative gap "
              << rel_power << ")\n"
              << "timing (this machine, one call): forward " << fwd_ms << " ms, jvp " << jvp_ms << " ms ("
              << jvp_ms / fwd_ms << "x)\n";

    // The graph of one MultiHeadAttention forward (the trained first block's, composed attention
    // so that every op shows) and of its backward recorded with create_graph.
    MultiHeadAttention& attn = m.blocks[0]->attn;
    Rng xrng(opt.seed + 9);
    const Tensor x = randn({1, 4, cfg.dim}, xrng, DType::Float64);
    AttentionOptions aopt;
    aopt.need_weights = true;
    const Tensor out = attn.forward(x, aopt).output;
    const Tensor attn_loss = mean(mul(out, out));
    NamedTensors names = attn.named_parameters();
    names.emplace_back("x", x);
    names.emplace_back("loss", attn_loss);
    const Tensor dW = grad({attn_loss}, {attn.in_proj_weight}, {}, GradOptions{true, true, false})[0];
    names.emplace_back("d loss / d in_proj_weight", dW);
    DotOptions dopt;
    dopt.title = "MultiHeadAttention(" + std::to_string(cfg.dim) + ", " + std::to_string(cfg.heads) +
                 ") forward, loss = mean(out^2)";
    const DotGraph fwd = graph_to_dot({attn_loss}, names, dopt);
    dopt.title = "its backward recorded with create_graph: d loss / d in_proj_weight";
    const DotGraph bwd = graph_to_dot({dW}, names, dopt);
    std::vector<std::string> files{"measurements.json", "graph_mha_forward.dot", "graph_mha_backward.dot"};
    std::ofstream(opt.out + "/graph_mha_forward.dot") << fwd.text;
    std::ofstream(opt.out + "/graph_mha_backward.dot") << bwd.text;
    std::cout << "graphs: MHA forward " << fwd.ops << " ops, its create_graph backward " << bwd.ops << " ops\n";

    const nlohmann::json checks = {{"hvp_vs_finite_differences", rel_fd}, {"vhp_vs_hvp", rel_vhp}, {"jvp_vs_grad_dot_v", rel_jvp},
                                   {"largest_magnitude_eigenvalue_lanczos", lanczos_top},
                                   {"largest_magnitude_eigenvalue_lanczos_residual", by_lanczos.residuals[0]},
                                   {"largest_magnitude_eigenvalue_power", power_top},
                                   {"power_vs_lanczos", rel_power},
                                   {"mha_forward_ops", fwd.ops}, {"mha_backward_ops", bwd.ops}};
    examples::write_metrics(
        opt.out + "/metrics.json",
        {{"example", "gradexp"},
         {"config", {{"seed", opt.seed}, {"optimizer", "sgd"}, {"lr", lr}, {"clip", opt.max_grad_norm}, {"max_steps", opt.steps},
                     {"model", "vision_transformer"}, {"data", "fashion_mnist"}, {"train_size", train_size},
                     {"test_size", test_size}, {"patch", cfg.patch}, {"dim", cfg.dim}, {"depth", cfg.depth},
                     {"heads", cfg.heads}, {"mlp", cfg.mlp}, {"pool", pool}, {"parameters", model.parameter_count()},
                     {"eigenvalues", settings.eigenvalues}, {"lanczos_iterations", settings.lanczos_iterations},
                     {"hutchinson_samples", settings.hutchinson_samples}, {"threads", num_threads()}}},
         {"evaluations", result.history},
         {"measurements", ms},
         {"final_heldout_exact_match", result.accuracy},
         {"final_test_accuracy", result.accuracy},
         {"heldout_size", test_size},
         {"steps", result.steps},
         {"checks", checks},
         {"wall_time_seconds_total", result.total_seconds},
         {"wall_time_seconds_this_run", result.seconds}});

    examples::Plots plots(!opt.no_plots);
    bool svg_ok = true;
    if (!opt.no_plots) {
      for (const char* which : {"forward", "backward"}) {
        const std::string base = opt.out + "/graph_mha_" + which;
        const std::string problem = render_svg(base + ".dot", base + ".svg");
        if (!problem.empty()) {
          std::cerr << "warning: no " << base << ".svg: " << problem << "\n";
          svg_ok = false;
          break;
        }
        files.push_back(std::string("graph_mha_") + which + ".svg");
      }
      plots.draw(opt.out + "/loss.png", examples::curves_script(opt.out + "/loss.png", result.curve, result.accuracies));
      if (!ms.empty()) {
        std::vector<std::pair<double, double>> two_over_lr;
        const long warmup = std::min<long>(100, opt.steps / 10);
        for (long s = 0; s < result.steps; ++s)
          two_over_lr.emplace_back(double(s + 1), 2 / warmup_cosine_lr(s, lr, warmup, opt.steps, lr * 0.05));
        plots.draw(opt.out + "/sharpness.png",
                   sharpness_script(opt.out + "/sharpness.png", ms, two_over_lr, settings.eigenvalues));
        plots.draw(opt.out + "/grad_norms.png", grad_norms_script(opt.out + "/grad_norms.png", ms));
        plots.draw(opt.out + "/trace_noise.png", trace_noise_script(opt.out + "/trace_noise.png", ms));
      }
    }
    files.insert(files.end(), plots.written().begin(), plots.written().end());
    std::cout << examples::outputs_line(opt.out, files, result) << "\n";
    std::cout << "ran on: " << runtime_summary() << "\n";
    const bool checks_ok = rel_fd < 1e-4 && rel_vhp < 1e-8 && rel_jvp < 1e-8;
    if (!checks_ok) std::cerr << "gradexp: a toolkit check failed (see 'checks' in metrics.json)\n";
    return checks_ok && plots.ok() && svg_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "gradexp: error: " << e.what() << "\n";
    return 2;
  }
}
