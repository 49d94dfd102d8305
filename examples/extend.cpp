// extend: a user-defined op in one file, outside the library — forward, backward, shape
// checks and registration — checked with the registry's public check_registered_op (the same
// gradcheck and gradgradcheck the library's ops get) and used in a model.
//
// The op: swish(x) = x * sigmoid(beta * x) (SiLU for beta = 1), with a learnable scalar beta.
//   y  = x * s,                  s = sigmoid(beta * x)         x: any shape, beta: ()
//   dx = g * (s + beta * x * s * (1 - s))
//   dbeta = sum(g * x^2 * s * (1 - s))
// The backward is written with xgrad ops, so gradgradcheck passes too.
#include <xgrad/framework/array.hpp>  // value<T>(), make_tensor(), dispatch_float()
#include <xgrad/framework/registry.hpp>
#include <xtensor/xmath.hpp>

#include "common.hpp"

namespace user {

using namespace xgrad;

Tensor swish(const Tensor& x, const Tensor& beta) {
  check_same_float("swish", "x", x, "beta", beta);
  if (beta.dim() != 0)
    throw ShapeError("swish: argument 'beta' must be a scalar (shape ()), got " + shape_str(beta.shape()));
  Tensor y = dispatch_float("swish", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T b = value<T>(beta)();
    return make_tensor(value<T>(x) / (T(1) + xt::exp(-b * value<T>(x))), "swish");
  });
  return record("swish", y, {x, beta}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor &x = n.input(0), &beta = n.input(1);
    Tensor s = sigmoid(mul(x, beta));
    Tensor ds = mul(s, 1.0 - s);  // s (1 - s)
    return {n.needs_grad(0) ? mul(g, add(s, mul(mul(beta, x), ds))) : Tensor(),
            n.needs_grad(1) ? sum(mul(g, mul(mul(x, x), ds))) : Tensor()};
  });
}

// Registered like a library op: check_registered_op("user.swish") runs the library's checks on
// these samples (and would compare the two backwards of an op recorded with record_fused).
XGRAD_REGISTER_OP({"user.swish", [](const auto& in) { return swish(in[0], in[1]); },
                   [](Rng& rng) -> std::vector<OpSample> {
                     return {{"x (2,3), beta ()", {sample_randn({2, 3}, rng), sample_uniform({}, 0.5, 1.5, rng)}},
                             {"x (4), beta ()", {sample_randn({4}, rng), sample_uniform({}, 0.5, 1.5, rng)}}};
                   }});

// A two-layer MLP with the user's activation.
class SwishMLP : public Module {
 public:
  SwishMLP(std::size_t in, std::size_t hidden, Rng& rng) : fc1(in, hidden, true, rng), fc2(hidden, 1, true, rng) {
    beta = scalar(1.0);
    register_module("fc1", &fc1);
    register_parameter("beta", &beta);
    register_module("fc2", &fc2);
  }
  Tensor forward(const Tensor& x) { return fc2.forward(swish(fc1.forward(x), beta.to(x.dtype()))); }
  Linear fc1, fc2;
  Tensor beta;
};

}  // namespace user

int main(int argc, char** argv) {
  using namespace xgrad;
  CLI::App app{"extend: a user-defined op (swish), gradchecked and trained in a model"};
  examples::CommonOptions opt;
  opt.steps = 300;
  examples::add_basic_options(app, opt);  // no checkpoint, so no --resume; no pictures
  CLI11_PARSE(app, argc, argv);
  try {
    examples::setup_runtime(opt);
    std::filesystem::create_directories(opt.out);

    // 1. The registry's checks on every sample of the op: gradcheck and gradgradcheck.
    const OpCheckResult check = check_registered_op("user.swish", opt.seed);
    std::cout << "check_registered_op(user.swish): " << check.samples << " samples, "
              << (check ? "ok" : "FAILED:\n" + check.message()) << "\n";
    const bool all_ok = check.ok;
    const nlohmann::json checks = {{"samples", check.samples}, {"ok", check.ok}, {"failures", check.failures}};
    Rng rng(opt.seed);

    // 2. Train the MLP on y = sin(3 x0) + x1^2 (float32, AdamW).
    user::SwishMLP model(2, 32, rng);
    AdamW optimizer(model.named_parameters(), 1e-2);
    Tensor x = uniform({256, 2}, -1, 1, rng);
    std::vector<double> xv = x.to_vector(), yv(256);
    for (std::size_t i = 0; i < 256; ++i) yv[i] = std::sin(3 * xv[2 * i]) + xv[2 * i + 1] * xv[2 * i + 1];
    Tensor y = tensor(yv, {256, 1});
    double first_loss = 0, last_loss = 0;
    nlohmann::json curve = nlohmann::json::array();
    for (long step = 0; step < opt.steps; ++step) {
      Tensor loss = mse_loss(model.forward(x), y);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      if (step == 0) first_loss = loss.item();
      last_loss = loss.item();
      if (step % 50 == 0 || step + 1 == opt.steps) curve.push_back({{"step", step + 1}, {"loss", last_loss}});
    }
    std::cout << "swish MLP: mse " << first_loss << " -> " << last_loss << " after " << opt.steps
              << " steps; learned beta = " << model.beta.item() << "\n";
    examples::write_metrics(opt.out + "/metrics.json", {{"example", "extend"}, {"checks", checks},
                                                     {"first_loss", first_loss}, {"final_loss", last_loss},
                                                     {"beta", model.beta.item()}, {"curve", curve}});
    std::cout << "ran on: " << runtime_summary() << "\n";
    return all_ok && last_loss < first_loss ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "extend: error: " << e.what() << "\n";
    return 2;
  }
}
