// The functional API (framework/functional.hpp): vjp, jvp, jacobian, hessian, hvp, vhp against
// central finite differences in float64, against each other, and against PyTorch 1.13's
// torch.autograd.functional on a small MLP and an nn.MultiheadAttention
// (tools/make_functional_fixtures.py); per-sample gradients against one backward per example
// (a Transformer encoder and the examples' Vision Transformer, examples/vit_model.hpp);
// every bad input.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <string>

#include "../examples/vit_model.hpp"
#include "golden.hpp"
#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/curvature.hpp"
#include "xgrad/framework/functional.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/ops.hpp"

using namespace xgrad;
using xgrad::test::allclose;

namespace {

Tensor randn64(const Shape& s, Rng& rng, double scale = 1.0) { return mul_scalar(randn(s, rng, DType::Float64), scale); }

// f(a, b) = tanh(a b) * sum(a^2) + b[0, :]: nonlinear in both, (3, 2) x (2, 4) -> (3, 4).
Tensor two_input_fn(const Tensors& in) {
  Tensor y = mul(tanh(matmul(in[0], in[1])), sum(mul(in[0], in[0])));
  return add(y, narrow(in[1], 0, 0, 1));
}

// d f / d x_i by central differences, as (out..., in_i...) flattened row-major.
std::vector<double> fd_jacobian(const TensorFn& f, const Tensors& xs, std::size_t which, double eps = 1e-6) {
  const std::size_t m = f(xs).numel(), n = xs[which].numel();
  std::vector<double> J(m * n);
  for (std::size_t c = 0; c < n; ++c) {
    auto shifted = [&](double h) {
      Tensors ys;
      for (const auto& x : xs) ys.push_back(x.clone());
      ys[which].mutable_data<double>()[c] += h;
      return f(ys).to_vector();
    };
    const auto plus = shifted(eps), minus = shifted(-eps);
    for (std::size_t r = 0; r < m; ++r) J[r * n + c] = (plus[r] - minus[r]) / (2 * eps);
  }
  return J;
}

std::vector<double> matvec(const Tensor& M, const Tensor& v) {  // M (rows..., v.shape...) . v
  const auto m = M.to_vector(), x = v.to_vector();
  std::vector<double> y(m.size() / x.size(), 0.0);
  for (std::size_t r = 0; r < y.size(); ++r)
    for (std::size_t c = 0; c < x.size(); ++c) y[r] += m[r * x.size() + c] * x[c];
  return y;
}

std::vector<double> add_vec(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

template <class E, class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    BOOST_ERROR("no exception; expected one containing: " << needle);
  } catch (const E& e) {
    BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos, "message: " << e.what() << "\nexpected: " << needle);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(functional)

BOOST_AUTO_TEST_CASE(jacobian_matches_finite_differences_in_both_modes) {
  Rng rng(1);
  const Tensors xs{randn64({3, 2}, rng), randn64({2, 4}, rng)};
  for (JacobianMode mode : {JacobianMode::Auto, JacobianMode::Reverse, JacobianMode::Forward}) {
    const Tensors J = jacobian(two_input_fn, xs, mode);
    BOOST_TEST_REQUIRE(J.size() == 2u);
    BOOST_TEST((J[0].shape() == Shape{3, 4, 3, 2}));
    BOOST_TEST((J[1].shape() == Shape{3, 4, 2, 4}));
    for (std::size_t i = 0; i < 2; ++i) BOOST_TEST(allclose(J[i], fd_jacobian(two_input_fn, xs, i), 1e-7, 1e-8));
  }
}

BOOST_AUTO_TEST_CASE(vjp_and_jvp_are_the_jacobian_products) {
  Rng rng(2);
  const Tensors xs{randn64({3, 2}, rng), randn64({2, 4}, rng)};
  const Tensor u = randn64({3, 4}, rng);
  const Tensors v{randn64({3, 2}, rng), randn64({2, 4}, rng)};
  const Tensors J = jacobian(two_input_fn, xs);
  // J v = sum_i J_i v_i
  const JvpResult t = jvp(two_input_fn, xs, v);
  BOOST_TEST(allclose(t.output, two_input_fn(xs), 0, 0));
  BOOST_TEST(allclose(t.tangent, add_vec(matvec(J[0], v[0]), matvec(J[1], v[1])), 1e-12, 1e-12));
  // u^T J_i against finite differences of <u, f>
  const VjpResult g = vjp(two_input_fn, xs, u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto Jfd = fd_jacobian(two_input_fn, xs, i);
    const auto uv = u.to_vector();
    std::vector<double> expect(xs[i].numel(), 0.0);
    for (std::size_t r = 0; r < uv.size(); ++r)
      for (std::size_t c = 0; c < expect.size(); ++c) expect[c] += uv[r] * Jfd[r * expect.size() + c];
    BOOST_TEST(allclose(g.grads[i], expect, 1e-7, 1e-8));
  }
  BOOST_TEST(!g.output.requires_grad());
  BOOST_TEST(!g.grads[0].requires_grad());
}

BOOST_AUTO_TEST_CASE(hessian_is_symmetric_and_matches_hvp_vhp_and_finite_differences) {
  Rng rng(3);
  const Tensors xs{randn64({3, 2}, rng), randn64({2, 4}, rng)};
  const TensorFn s = [](const Tensors& in) { return mul_scalar(sum(pow(two_input_fn(in), 2.0)), 0.5); };
  const std::vector<Tensors> H = hessian(s, xs);
  BOOST_TEST_REQUIRE(H.size() == 2u);
  BOOST_TEST((H[0][1].shape() == Shape{3, 2, 2, 4}));
  // Symmetry: H[i][j] (a, b) == H[j][i] (b, a).
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 2; ++j) {
      const auto hij = H[i][j].to_vector(), hji = H[j][i].to_vector();
      const std::size_t ni = xs[i].numel(), nj = xs[j].numel();
      double worst = 0, scale = 0;
      for (std::size_t a = 0; a < ni; ++a)
        for (std::size_t b = 0; b < nj; ++b) {
          worst = std::max(worst, std::abs(hij[a * nj + b] - hji[b * ni + a]));
          scale = std::max(scale, std::abs(hij[a * nj + b]));
        }
      BOOST_TEST(worst <= 1e-12 * scale, "H[" << i << "][" << j << "] asymmetric by " << worst);
      BOOST_TEST(scale > 0.1);
    }
  // Rows of H are the Jacobian of the gradient: finite differences of value_and_grad.
  for (std::size_t j = 0; j < 2; ++j) {
    for (std::size_t i = 0; i < 2; ++i) {
      const TensorFn grad_i = [&](const Tensors& in) { return value_and_grad(s, in).grads[i]; };
      BOOST_TEST(allclose(H[i][j], fd_jacobian(grad_i, xs, j), 1e-6, 1e-7));
    }
  }
  // hvp == vhp == H v
  const Tensors v{randn64({3, 2}, rng), randn64({2, 4}, rng)};
  const HvpResult hv = hvp(s, xs, v), vh = vhp(s, xs, v);
  BOOST_TEST(allclose(hv.output, s(xs), 0, 0));
  for (std::size_t i = 0; i < 2; ++i) {
    const auto Hv = add_vec(matvec(H[i][0], v[0]), matvec(H[i][1], v[1]));
    BOOST_TEST(allclose(hv.product[i], Hv, 1e-11, 1e-11));
    BOOST_TEST(allclose(vh.product[i], Hv, 1e-11, 1e-11));
  }
}

BOOST_AUTO_TEST_CASE(create_graph_nests_the_transforms) {
  // The Jacobian of the gradient (differentiable through value_and_grad) is the Hessian; the
  // jvp of the gradient is hvp; jvp itself can be differentiated again.
  Rng rng(4);
  const Tensors xs{randn64({5}, rng)};
  const TensorFn s = [](const Tensors& in) { return sum(mul(tanh(in[0]), exp(mul_scalar(in[0], 0.3)))); };
  FunctionalOptions keep;
  keep.create_graph = true;
  const TensorFn grad_fn = [&](const Tensors& in) { return value_and_grad(s, in, keep).grads[0]; };
  const Tensor H = hessian(s, xs)[0][0];
  BOOST_TEST(allclose(jacobian(grad_fn, xs, JacobianMode::Reverse)[0], H, 1e-12, 1e-13));
  BOOST_TEST(allclose(jacobian(grad_fn, xs, JacobianMode::Forward)[0], H, 1e-12, 1e-13));
  const Tensors v{randn64({5}, rng)};
  BOOST_TEST(allclose(jvp(grad_fn, xs, v).tangent, hvp(s, xs, v).product[0], 1e-12, 1e-13));
  // d/dx <jvp(s, x, v)> = d/dx (grad s . v) = H v
  const TensorFn jvp_fn = [&](const Tensors& in) { return jvp(s, in, v, keep).tangent; };
  BOOST_TEST(allclose(value_and_grad(jvp_fn, xs).grads[0], hvp(s, xs, v).product[0], 1e-12, 1e-13));
  // A Hessian built with create_graph is differentiable: d/dx sum(H) = third derivatives.
  const TensorFn sum_h = [&](const Tensors& in) { return sum(hessian(s, in, keep)[0][0]); };
  const Tensor third = value_and_grad(sum_h, xs).grads[0];
  const TensorFn sum_h_plain = [&](const Tensors& in) { return sum(hessian(s, in)[0][0]); };
  std::vector<double> fd(5);
  for (std::size_t c = 0; c < 5; ++c) {
    Tensor p = xs[0].clone(), m = xs[0].clone();
    p.mutable_data<double>()[c] += 1e-5, m.mutable_data<double>()[c] -= 1e-5;
    fd[c] = (sum_h_plain({p}).item() - sum_h_plain({m}).item()) / 2e-5;
  }
  BOOST_TEST(allclose(third, fd, 1e-6, 1e-7));
}

BOOST_AUTO_TEST_CASE(transforms_leave_grads_and_grad_mode_alone) {
  Rng rng(5);
  Tensor x = randn64({4}, rng);
  x.set_requires_grad();
  const TensorFn f = [](const Tensors& in) { return sum(exp(in[0])); };
  NoGradGuard off;
  const VjpResult g = value_and_grad(f, {x});
  BOOST_TEST(allclose(g.grads[0], exp(x).to_vector(), 1e-14, 0));
  BOOST_TEST(!x.grad().defined());
  BOOST_TEST(!is_grad_enabled());
  BOOST_TEST(!hessian(f, {x})[0][0].requires_grad());
}

// The transforms record what they compose themselves (<J^T u, v>, <grad f, v>), so each one
// works inside NoGradGuard, as PyTorch's torch.autograd.functional does: f = sum(x^3) has
// H v = 6 x v, g = exp(2x) has J v = 2 e^(2x) v.
BOOST_AUTO_TEST_CASE(every_transform_works_inside_no_grad_guard) {
  Rng rng(7);
  const Tensor x = randn64({3}, rng), v = randn64({3}, rng);
  const TensorFn f = [](const Tensors& in) { return sum(pow(in[0], 3.0)); };
  const TensorFn g = [](const Tensors& in) { return exp(mul_scalar(in[0], 2.0)); };
  const auto xv = x.to_vector(), vv = v.to_vector();
  std::vector<double> hv(3), jv(3);
  for (std::size_t i = 0; i < 3; ++i) hv[i] = 6 * xv[i] * vv[i], jv[i] = 2 * std::exp(2 * xv[i]) * vv[i];
  NoGradGuard off;
  BOOST_TEST(allclose(jvp(g, {x}, {v}).tangent, jv, 1e-13, 0));
  BOOST_TEST(allclose(vhp(f, {x}, {v}).product[0], hv, 1e-13, 0));
  BOOST_TEST(allclose(hvp(f, {x}, {v}).product[0], hv, 1e-13, 0));
  BOOST_TEST(allclose(HessianOperator(f, {x})({v})[0], hv, 1e-13, 0));
  for (const JacobianMode mode : {JacobianMode::Forward, JacobianMode::Reverse})
    BOOST_TEST(allclose(test::f64(matvec(jacobian(g, {x}, mode)[0], v), {3}), jv, 1e-13, 0));
  BOOST_TEST(allclose(test::f64(matvec(hessian(f, {x})[0][0], v), {3}), hv, 1e-13, 0));
  BOOST_TEST(!is_grad_enabled());
}

BOOST_AUTO_TEST_CASE(float32_inputs_give_float32_results) {
  Rng rng(6);
  const Tensors xs{randn({3}, rng)};
  const TensorFn f = [](const Tensors& in) { return sum(pow(in[0], 3.0)); };
  const Tensor H = hessian(f, xs)[0][0];
  BOOST_TEST(H.dtype() == DType::Float32);
  const auto x = xs[0].to_vector(), h = H.to_vector();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(std::abs(h[i * 3 + j] - (i == j ? 6 * x[i] : 0.0)) < 1e-5);
  BOOST_TEST(jacobian(f, xs, JacobianMode::Forward)[0].dtype() == DType::Float32);
}

// --- PyTorch fixtures ----------------------------------------------------------------------------

namespace {

// Every quantity of a fixture of tools/make_functional_fixtures.py against xgrad's.
void check_against_torch(test::Golden& g, const TensorFn& f) {
  std::vector<std::string> names;
  {
    const std::string list = g.str("inputs");
    std::size_t b = 0;
    while (b <= list.size()) {
      const std::size_t e = std::min(list.find(',', b), list.size());
      names.push_back(list.substr(b, e - b));
      b = e + 1;
    }
  }
  Tensors xs, tangents, vectors;
  for (const auto& n : names) {
    xs.push_back(g.at("input." + n));
    tangents.push_back(g.at("tangent." + n));
    vectors.push_back(g.at("vector." + n));
  }
  const TensorFn s = [&](const Tensors& in) { return mul_scalar(sum(pow(f(in), 2.0)), 0.5); };
  const double rtol = 1e-10, atol = 1e-12;
  BOOST_TEST(allclose(f(xs), g.at("output"), rtol, atol));
  const VjpResult v = vjp(f, xs, g.at("cotangent"));
  const JvpResult t = jvp(f, xs, tangents);
  BOOST_TEST(allclose(t.tangent, g.at("jvp"), rtol, atol));
  const Tensors Jr = jacobian(f, xs, JacobianMode::Reverse), Jf = jacobian(f, xs, JacobianMode::Forward);
  const std::vector<Tensors> H = hessian(s, xs);
  const HvpResult hv = hvp(s, xs, vectors), vh = vhp(s, xs, vectors);
  BOOST_TEST(allclose(hv.output, g.at("scalar"), rtol, atol));
  for (std::size_t i = 0; i < names.size(); ++i) {
    BOOST_TEST_CONTEXT(g.name << ": input " << names[i]) {
      BOOST_TEST(allclose(v.grads[i], g.at("vjp." + names[i]), rtol, atol));
      BOOST_TEST(allclose(Jr[i], g.at("jacobian." + names[i]), rtol, atol));
      BOOST_TEST(allclose(Jf[i], g.at("jacobian." + names[i]), rtol, atol));
      BOOST_TEST(allclose(hv.product[i], g.at("hvp." + names[i]), rtol, atol));
      BOOST_TEST(allclose(vh.product[i], g.at("vhp." + names[i]), rtol, atol));
      for (std::size_t j = 0; j < names.size(); ++j)
        BOOST_TEST(allclose(H[i][j], g.at("hessian." + names[i] + "." + names[j]), rtol, atol),
                   "hessian block " << names[i] << ", " << names[j]);
    }
  }
  g.check_all_used();
}

}  // namespace

BOOST_AUTO_TEST_CASE(torch_fixture_mlp) {
  test::Golden g("mlp", std::string(XGRAD_FIXTURE_DIR) + "/functional");
  const TensorFn mlp = [](const Tensors& in) {
    return linear(tanh(linear(in[0], in[1], in[2])), in[3], in[4]);
  };
  check_against_torch(g, mlp);
}

BOOST_AUTO_TEST_CASE(torch_fixture_attention_through_parameter_function) {
  test::Golden g("attention", std::string(XGRAD_FIXTURE_DIR) + "/functional");
  Rng rng(0);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2), rng);
  mha.to(DType::Float64);
  AttentionOptions opt;
  opt.attn_mask = causal_mask(3);
  // f(x, parameters...) = mha(x) with the parameters replaced: parameter_function composed
  // with an input that is not a parameter.
  const TensorFn f = [&](const Tensors& in) {
    const Tensor x = in[0];
    const TensorFn of_params = parameter_function(mha, [&] { return mha.forward(x, opt).output; });
    return of_params(Tensors(in.begin() + 1, in.end()));
  };
  std::vector<std::string> order;
  for (const auto& [name, p] : mha.named_parameters()) order.push_back(name);
  BOOST_TEST((order == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  const Tensor before = mha.in_proj_weight;
  check_against_torch(g, f);
  BOOST_TEST(mha.in_proj_weight.impl() == before.impl());  // the module's own parameters are back
}

// --- modules ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(parameter_function_swaps_and_restores) {
  Rng rng(7);
  Linear lin(3, 2, true, rng);
  lin.to(DType::Float64);
  const Tensor x = randn64({4, 3}, rng);
  const Tensor w0 = lin.weight, b0 = lin.bias;
  const TensorFn f = parameter_function(lin, [&] { return sum(pow(lin.forward(x), 2.0)); });
  // Against the module's own gradient.
  const VjpResult g = value_and_grad(f, lin.parameters());
  const Tensors direct = grad({sum(pow(lin.forward(x), 2.0))}, lin.parameters());
  BOOST_TEST(allclose(g.grads[0], direct[0], 1e-14, 0));
  BOOST_TEST(allclose(g.grads[1], direct[1], 1e-14, 0));
  BOOST_TEST(!lin.weight.grad().defined());
  const NamedTensors named = named_like(lin, g.grads);
  BOOST_TEST(named[0].first == "weight");
  BOOST_TEST(named[1].first == "bias");
  // Evaluated at other parameters: zero weight and bias give f = 0.
  BOOST_TEST(f({zeros({2, 3}, DType::Float64), zeros({2}, DType::Float64)}).item() == 0.0);
  BOOST_TEST(lin.weight.impl() == w0.impl());
  // Bad parameter lists; the originals are restored after a throwing loss too.
  expect_error<ValueError>([&] { f({w0}); }, "parameter_function: 1 tensors given for a module with 2 parameters");
  expect_error<ShapeError>([&] { f({zeros({3, 2}, DType::Float64), b0}); },
                           "parameter_function: tensor 0 (for parameter 'weight') (3, 2) float64 must have the shape of the parameter (2, 3) float64");
  expect_error<DTypeError>([&] { f({w0.to(DType::Float32), b0}); }, "(for parameter 'weight') (2, 3) float32 must have the dtype");
  const TensorFn throwing = parameter_function(lin, [&]() -> Tensor { throw ValueError("boom"); });
  expect_error<ValueError>([&] { throwing({zeros({2, 3}, DType::Float64), b0}); }, "boom");
  BOOST_TEST(lin.weight.impl() == w0.impl());
  BOOST_TEST(lin.bias.impl() == b0.impl());
  expect_error<ValueError>([&] { named_like(lin, {w0}); }, "named_like: 1 tensors given for a module with 2 parameters");
}

// --- bad input ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bad_inputs_are_documented_errors) {
  Rng rng(8);
  const Tensors xs{randn64({3}, rng)};
  const TensorFn vec = [](const Tensors& in) { return exp(in[0]); };          // (3) -> (3)
  const TensorFn scal = [](const Tensors& in) { return sum(exp(in[0])); };    // (3) -> ()
  // Non-scalars where a scalar is required.
  expect_error<ValueError>([&] { hessian(vec, xs); }, "hessian: f must return a scalar (one element), but it returned (3) float64");
  expect_error<ValueError>([&] { hvp(vec, xs, xs); }, "hvp: f must return a scalar");
  expect_error<ValueError>([&] { vhp(vec, xs, xs); }, "vhp: f must return a scalar");
  expect_error<ValueError>([&] { value_and_grad(vec, xs); }, "value_and_grad: f must return a scalar");
  expect_error<ValueError>([&] { vjp(vec, xs); }, "vjp: f returned (3) float64, not a scalar: pass a cotangent");
  // Tangents, cotangents and vectors of the wrong shape, dtype or count.
  expect_error<ShapeError>([&] { jvp(vec, xs, {zeros({4}, DType::Float64)}); },
                           "jvp: tangent 0 (4) float64 must have the shape of input 0 (3) float64");
  expect_error<DTypeError>([&] { jvp(vec, xs, {zeros({3}, DType::Float32)}); },
                           "jvp: tangent 0 (3) float32 must have the dtype of input 0 (3) float64");
  expect_error<ValueError>([&] { jvp(vec, xs, {}); }, "jvp: 0 tangents given for 1 inputs");
  expect_error<ValueError>([&] { jvp(vec, xs, {Tensor()}); }, "jvp: tangent 0 is undefined");
  expect_error<ShapeError>([&] { vjp(vec, xs, zeros({2}, DType::Float64)); },
                           "vjp: cotangent (2) float64 must have the shape of f's output (3) float64");
  expect_error<DTypeError>([&] { vjp(vec, xs, zeros({3}, DType::Float32)); }, "vjp: cotangent (3) float32 must have the dtype");
  expect_error<ShapeError>([&] { hvp(scal, xs, {zeros({3, 1}, DType::Float64)}); }, "hvp: vector 0 (3, 1) float64 must have the shape");
  expect_error<ValueError>([&] { vhp(scal, xs, {xs[0], xs[0]}); }, "vhp: 2 vectors given for 1 inputs");
  // Inputs and outputs that are not float.
  expect_error<DTypeError>([&] { jacobian(vec, {index_tensor({1, 2}, {2})}); }, "jacobian: input 0 (2) int64 is not differentiable");
  expect_error<DTypeError>([&] { vjp(vec, {Tensor()}); }, "vjp: input 0 is undefined");
  expect_error<ValueError>([&] { jacobian(vec, {}); }, "jacobian: no inputs given");
  const TensorFn to_bool = [](const Tensors& in) { return causal_mask(in[0].numel()); };
  expect_error<DTypeError>([&] { jacobian(to_bool, xs); }, "jacobian: f returned a (3, 3) bool tensor");
  expect_error<ValueError>([&] { jacobian(TensorFn(), xs); }, "jacobian: no function given");
}

BOOST_AUTO_TEST_CASE(unused_inputs_error_or_zeros) {
  Rng rng(9);
  const Tensors xs{randn64({3}, rng), randn64({2, 2}, rng)};
  const TensorFn f = [](const Tensors& in) { return sum(exp(in[0])); };  // ignores in[1]
  const std::string msg = "input 1 (2, 2) float64 is not used to compute f's output (pass allow_unused for zeros)";
  expect_error<GraphError>([&] { vjp(f, xs); }, "vjp: " + msg);
  expect_error<GraphError>([&] { jvp(f, xs, xs); }, "jvp: " + msg);
  expect_error<GraphError>([&] { jacobian(f, xs); }, "jacobian: " + msg);
  expect_error<GraphError>([&] { hessian(f, xs); }, "hessian: " + msg);
  expect_error<GraphError>([&] { hvp(f, xs, xs); }, "hvp: " + msg);
  expect_error<GraphError>([&] { vhp(f, xs, xs); }, "vhp: " + msg);
  FunctionalOptions o;
  o.allow_unused = true;
  const VjpResult g = vjp(f, xs, Tensor(), o);
  BOOST_TEST(allclose(g.grads[1], std::vector<double>(4, 0.0), 0, 0));
  BOOST_TEST(allclose(jvp(f, xs, {zeros({3}, DType::Float64), ones({2, 2}, DType::Float64)}, o).tangent, {0.0}, 0, 0));
  const std::vector<Tensors> H = hessian(f, xs, o);
  BOOST_TEST((H[1][1].shape() == Shape{2, 2, 2, 2}));
  BOOST_TEST(allclose(H[1][0], std::vector<double>(12, 0.0), 0, 0));
  BOOST_TEST(allclose(H[0][0], {std::exp(xs[0].to_vector()[0]), 0, 0, 0, std::exp(xs[0].to_vector()[1]), 0, 0, 0,
                                std::exp(xs[0].to_vector()[2])}, 1e-14, 0));
  BOOST_TEST(allclose(hvp(f, xs, xs, o).product[1], std::vector<double>(4, 0.0), 0, 0));
  // A constant function: every input unused.
  const TensorFn constant = [](const Tensors&) { return scalar(2.0, DType::Float64); };
  BOOST_TEST(allclose(jacobian(constant, xs, JacobianMode::Auto, o)[0], std::vector<double>(3, 0.0), 0, 0));
  BOOST_TEST(allclose(hvp(constant, xs, xs, o).product[0], std::vector<double>(3, 0.0), 0, 0));
  // f linear in x: the Hessian exists and is zero (not an unused input).
  const TensorFn lin = [](const Tensors& in) { return sum(mul_scalar(in[0], 3.0)); };
  BOOST_TEST(allclose(hessian(lin, {xs[0]})[0][0], std::vector<double>(9, 0.0), 0, 0));
  BOOST_TEST(allclose(hvp(lin, {xs[0]}, {xs[0]}).product[0], std::vector<double>(3, 0.0), 0, 0));
}

BOOST_AUTO_TEST_CASE(a_tensor_in_two_slots_is_two_variables_in_both_modes) {
  // f(x0, x1) = sum(x0 x1) at x0 = x1 = a: H[0][0] = 0, H[0][1] = I, grad_0 = grad_1 = a, with
  // or without create_graph (with it, both slots were one variable: 2 I and 2 a).
  Rng rng(21);
  Tensor a = randn64({3}, rng);
  a.set_requires_grad();
  const TensorFn s = [](const Tensors& in) { return sum(mul(in[0], in[1])); };
  FunctionalOptions cg;
  cg.create_graph = true;
  const std::vector<double> I{1, 0, 0, 0, 1, 0, 0, 0, 1}, Z(9, 0.0);
  for (const FunctionalOptions& o : {FunctionalOptions{}, cg}) {
    BOOST_TEST_CONTEXT("create_graph " << o.create_graph) {
      const std::vector<Tensors> H = hessian(s, {a, a}, o);
      BOOST_TEST(allclose(H[0][0], Z, 0, 0));
      BOOST_TEST(allclose(H[0][1], I, 0, 0));
      BOOST_TEST(allclose(H[1][1], Z, 0, 0));
      const VjpResult g = value_and_grad(s, {a, a}, o);
      BOOST_TEST(allclose(g.grads[0], a.detach(), 0, 0));
      BOOST_TEST(allclose(g.grads[1], a.detach(), 0, 0));
    }
  }
  // With create_graph the results stay differentiable with respect to a itself:
  // d/da sum(grad_0) = d/da sum(a) = 1 per element.
  const Tensor g0 = value_and_grad(s, {a, a}, cg).grads[0];
  BOOST_TEST(allclose(grad({sum(g0)}, {a})[0], {1, 1, 1}, 0, 0));
  BOOST_TEST(!a.grad().defined());
}

BOOST_AUTO_TEST_CASE(jacobians_over_the_memory_bound_fail_before_allocating) {
  // (2^20) -> (2^20) float64: a 2^40-element, 8 TiB Jacobian.
  const Tensor big = zeros({std::size_t(1) << 20}, DType::Float64);
  const TensorFn f = [](const Tensors& in) { return exp(in[0]); };
  expect_error<MemoryError>([&] { jacobian(f, {big}); },
                            "jacobian: the Jacobian of f's output (1048576) float64 (1 block: (1048576, 1048576) float64) "
                            "needs 8796093022208 bytes, more than the limit of");
  const TensorFn s = [](const Tensors& in) { return sum(exp(in[0])); };
  expect_error<MemoryError>([&] { hessian(s, {big}); }, "hessian: the Hessian (1 block: (1048576, 1048576) float64) needs");
  // Over 2^40 elements in one block: ValueError.
  const Tensor bigger = zeros({std::size_t(1) << 21}, DType::Float64);
  expect_error<ValueError>([&] { jacobian(f, {bigger}); }, "jacobian: the Jacobian of f's output (2097152) float64 has a block of shape (2097152, 2097152): more than 2^40 elements");
  // An explicit bound.
  FunctionalOptions o;
  o.max_bytes = 100;
  const Tensors xs{zeros({2, 2}, DType::Float64), zeros({3}, DType::Float64)};
  const TensorFn g = [](const Tensors& in) { return add(sum(in[0]), sum(exp(in[1]))); };
  expect_error<MemoryError>([&] { hessian(g, xs, o); },
                            "hessian: the Hessian (4 blocks: (2, 2, 2, 2) float64, (2, 2, 3) float64, (3, 2, 2) float64, "
                            "(3, 3) float64) needs 392 bytes, more than the limit of 100 bytes (FunctionalOptions::max_bytes");
  o.max_bytes = 392;
  BOOST_TEST(hessian(g, xs, o)[1][1].numel() == 9u);
}

BOOST_AUTO_TEST_SUITE_END()

// --- per-sample gradients ---------------------------------------------------------------------------

namespace {

// A small bidirectional encoder (the reverse example's model family) in float64, with
// per-example losses cross_entropy(logits_i, targets_i) (mean over example i's tokens).
struct EncoderBatch {
  std::size_t B, T;
  Tensor tokens, padding;
  std::vector<Tensor> targets;  // per example, (1, T)
  Tensor all_targets;           // (B, T)
};

EncoderBatch encoder_batch(std::size_t B, std::size_t T, std::int64_t V, Rng& rng) {
  EncoderBatch b{B, T, {}, {}, {}, {}};
  std::vector<std::int64_t> tok(B * T), tgt(B * T, -100);
  std::vector<bool> pad(B * T, false);
  for (std::size_t i = 0; i < B; ++i) {
    const auto L = std::size_t(rng.uniform_int(1, std::int64_t(T)));
    for (std::size_t t = 0; t < T; ++t) {
      tok[i * T + t] = t < L ? rng.uniform_int(0, V - 2) : V - 1;
      pad[i * T + t] = t >= L;
    }
    for (std::size_t t = 0; t < L; ++t) tgt[i * T + t] = tok[i * T + L - 1 - t];
    b.targets.push_back(index_tensor(std::vector<std::int64_t>(tgt.begin() + long(i * T), tgt.begin() + long((i + 1) * T)), {1, T}));
  }
  b.tokens = index_tensor(tok, {B, T});
  b.padding = bool_tensor(pad, {B, T});
  b.all_targets = index_tensor(tgt, {B, T});
  return b;
}

TransformerConfig small_encoder_config() {
  TransformerConfig cfg;
  cfg.vocab_size = 7, cfg.max_len = 6, cfg.embed_dim = 8, cfg.num_heads = 2, cfg.ff_hidden = 12, cfg.num_layers = 2;
  cfg.seed = 11;
  return cfg;
}

Tensor per_example_losses(TransformerEncoder& model, const EncoderBatch& b) {
  const Tensor logits = model.forward(b.tokens, b.padding);  // (B, T, V)
  std::vector<Tensor> losses;
  for (std::size_t i = 0; i < b.B; ++i)
    losses.push_back(reshape(cross_entropy(narrow(logits, 0, i, 1), b.targets[i]), {1}));
  return concat(losses, 0);
}

// Row i of every parameter's gradient from a forward and backward of example i alone.
NamedTensors one_at_a_time(TransformerEncoder& model, const EncoderBatch& b) {
  const NamedTensors params = model.named_parameters();
  NamedTensors out;
  std::vector<std::vector<double>> rows(params.size());
  for (std::size_t i = 0; i < b.B; ++i) {
    const std::int64_t* tk = b.tokens.data<std::int64_t>() + i * b.T;
    const std::vector<std::int64_t> ids(tk, tk + b.T);
    std::vector<bool> pad;
    for (std::size_t t = 0; t < b.T; ++t) pad.push_back(b.padding.data<bool>()[i * b.T + t]);
    const Tensor loss = cross_entropy(model.forward(index_tensor(ids, {1, b.T}), bool_tensor(pad, {1, b.T})), b.targets[i]);
    const Tensors gs = grad({loss}, model.parameters());
    for (std::size_t k = 0; k < params.size(); ++k) {
      const auto v = gs[k].to_vector();
      rows[k].insert(rows[k].end(), v.begin(), v.end());
    }
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    Shape s{b.B};
    s.insert(s.end(), params[k].second.shape().begin(), params[k].second.shape().end());
    out.emplace_back(params[k].first, tensor(rows[k], s, DType::Float64));
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(per_sample_gradients_suite)

BOOST_AUTO_TEST_CASE(encoder_matches_one_backward_per_example) {
  // B = 5 != T = 6, and B = T = 6 (the positional table's (T, E) slice then has a leading
  // axis of size B that is not the batch: the check must see it and walk past it).
  for (std::size_t B : {5u, 6u}) {
    BOOST_TEST_CONTEXT("B = " << B) {
      TransformerEncoder model(small_encoder_config());
      model.to(DType::Float64);
      Rng rng(12 + B);
      const EncoderBatch b = encoder_batch(B, 6, 7, rng);
      const NamedTensors expect = one_at_a_time(model, b);
      const auto losses = [&] { return per_example_losses(model, b); };
      const PerSampleGradients fast = per_sample_gradients(model, losses);
      PerSampleOptions loop_opt;
      loop_opt.method = PerSampleMethod::Loop;
      const PerSampleGradients loop = per_sample_gradients(model, losses, loop_opt);
      BOOST_TEST_REQUIRE(fast.grads.size() == expect.size());
      for (std::size_t k = 0; k < expect.size(); ++k) {
        BOOST_TEST_CONTEXT(expect[k].first << " (" << fast.methods[k] << ")") {
          BOOST_TEST(fast.grads[k].first == expect[k].first);
          BOOST_TEST(allclose(fast.grads[k].second, expect[k].second, 1e-10, 1e-12));
          BOOST_TEST(allclose(loop.grads[k].second, expect[k].second, 1e-10, 1e-12));
          BOOST_TEST(loop.methods[k] == "loop");
          const std::string& name = expect[k].first;
          const bool is_linear = name.find("in_proj") != std::string::npos || name.find("out_proj") != std::string::npos ||
                                 name.find("ff.") != std::string::npos || name.rfind("head.", 0) == 0;
          // The token table's use (embedding) takes the op's backward per example; positions,
          // LayerNorm weights and biases are broadcast over the batch (a reduction split per example).
          const bool is_table = name.find("tok_emb") != std::string::npos;
          BOOST_TEST(fast.methods[k] == (is_linear ? "linear" : is_table ? "node" : "broadcast"));
        }
      }
      // The rows sum to the gradient of the summed losses.
      const Tensors total = grad({sum(losses())}, model.parameters());
      for (std::size_t k = 0; k < total.size(); ++k)
        BOOST_TEST(allclose(sum(fast.grads[k].second, {0}), total[k], 1e-10, 1e-12));
      BOOST_TEST(allclose(fast.losses, losses().detach(), 0, 0));
    }
  }
}

BOOST_AUTO_TEST_CASE(vision_transformer_matches_one_backward_per_example) {
  // gradexp's and fashion_vit's model: patchify -> linear -> [class token] + positions ->
  // pre-LN blocks -> LayerNorm -> class token or mean -> linear. Every parameter is a linear's
  // (one batched GEMM) or broadcast over the batch (the class token's broadcast_to, the
  // positions' add, LayerNorm's weight and bias): no per-example loop.
  for (bool mean_pool : {false, true}) {
    BOOST_TEST_CONTEXT((mean_pool ? "mean pooling" : "class token")) {
      examples::VitConfig c;
      c.patch = 7, c.dim = 8, c.depth = 2, c.heads = 2, c.mlp = 12, c.mean_pool = mean_pool, c.seed = 3;
      examples::VisionTransformer model(c);
      model.to(DType::Float64);
      const std::size_t B = 5;
      Rng rng(41);
      const Tensor images = randn64({B, 28, 28}, rng);
      std::vector<std::int64_t> lab(B);
      for (auto& l : lab) l = rng.uniform_int(0, 9);
      const Tensor labels = index_tensor(lab, {B});
      const PerSampleGradients g =
          per_sample_gradients(model, [&] { return cross_entropy_per_example(model.forward(images), labels); });
      const NamedTensors params = model.named_parameters();
      BOOST_TEST_REQUIRE(g.grads.size() == params.size());
      std::vector<std::vector<double>> rows(params.size());
      for (std::size_t i = 0; i < B; ++i) {
        const Tensor loss = cross_entropy(model.forward(narrow(images, 0, i, 1)), narrow(labels, 0, i, 1));
        const Tensors gi = grad({loss}, model.parameters());
        for (std::size_t k = 0; k < params.size(); ++k) {
          const auto v = gi[k].to_vector();
          rows[k].insert(rows[k].end(), v.begin(), v.end());
        }
      }
      for (std::size_t k = 0; k < params.size(); ++k) {
        const std::string& name = params[k].first;
        BOOST_TEST_CONTEXT(name << " (" << g.methods[k] << ")") {
          BOOST_TEST(allclose(g.grads[k].second, rows[k], 1e-10, 1e-12));
          const bool is_linear = name.find("_proj") != std::string::npos || name.find(".ff.") != std::string::npos ||
                                 name.rfind("embed.", 0) == 0 || name.rfind("head.", 0) == 0;
          BOOST_TEST(g.methods[k] == (is_linear ? "linear" : "broadcast"));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(broadcast_split_is_refused_when_slices_mix_examples) {
  // An op y = x + w (x (B, E), w (E)) whose vjp for w is sum_to(Z) with Z = g rolled along the
  // batch: the sum (the batched gradient) is right, but Z's slice i is example i - 1's. The
  // check with random weights must refuse the split and run the op's backward per example.
  const std::size_t B = 4, E = 3;
  Rng rng(8);
  const Tensor x = randn64({B, E}, rng);
  const Tensor w = randn64({E}, rng);
  w.set_requires_grad();
  auto rolled_add = [](const Tensor& a, const Tensor& b) {
    Tensor y;
    {
      NoGradGuard no_grad;
      y = add(a, b);
    }
    return record("rolled_add", y, {a, b}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
      const std::size_t m = g.shape()[0];
      const Tensor rolled = concat({narrow(g, 0, m - 1, 1), narrow(g, 0, 0, m - 1)}, 0);  // (B, E), slice i = g_{i-1}
      return {n.needs_grad(0) ? g : Tensor(), n.needs_grad(1) ? sum_to(rolled, n.input(1).shape()) : Tensor()};
    });
  };
  const auto losses = [&] { return sum(tanh(rolled_add(x, w)), {1}); };  // (B)
  const PerSampleGradients g = per_sample_gradients({{"w", w}}, losses);
  BOOST_TEST(g.methods[0] == "node");
  std::vector<double> expect;
  for (std::size_t i = 0; i < B; ++i) {
    const Tensor gi = grad({narrow(losses(), 0, i, 1)}, {w})[0];
    const auto v = gi.to_vector();
    expect.insert(expect.end(), v.begin(), v.end());
  }
  BOOST_TEST(allclose(g.grads[0].second, expect, 1e-12, 1e-14));
}

BOOST_AUTO_TEST_CASE(cross_entropy_per_example_is_each_examples_cross_entropy) {
  TransformerEncoder model(small_encoder_config());
  model.to(DType::Float64);
  Rng rng(21);
  EncoderBatch b = encoder_batch(4, 6, 7, rng);
  const Tensor logits = model.forward(b.tokens, b.padding);
  BOOST_TEST(allclose(cross_entropy_per_example(logits, b.all_targets), per_example_losses(model, b), 1e-14, 1e-15));
  // Its per-sample gradients (another graph: one log_softmax over the batch) are exact too.
  const auto losses = [&] { return cross_entropy_per_example(model.forward(b.tokens, b.padding), b.all_targets); };
  const NamedTensors expect = one_at_a_time(model, b);
  const PerSampleGradients g = per_sample_gradients(model, losses);
  for (std::size_t k = 0; k < expect.size(); ++k)
    BOOST_TEST(allclose(g.grads[k].second, expect[k].second, 1e-10, 1e-12), expect[k].first << " (" << g.methods[k] << ")");
  // An example whose targets are all ignored has loss 0 (and zero gradients).
  const Tensor ignored = index_tensor(std::vector<std::int64_t>(6, -100), {1, 6});
  BOOST_TEST(cross_entropy_per_example(narrow(logits, 0, 0, 1), ignored).item() == 0.0);
  BOOST_CHECK_THROW(cross_entropy_per_example(logits, index_tensor({0, 1}, {2})), ShapeError);
  BOOST_CHECK_THROW(cross_entropy_per_example(logits, b.tokens.to(DType::Float64)), DTypeError);
  BOOST_CHECK_THROW(cross_entropy_per_example(logits, index_tensor(std::vector<std::int64_t>(24, 7), {4, 6})), IndexError);
  // (B, C) logits with (B) targets: one position per example, so the mean is cross_entropy's.
  const Tensor flat = sum(logits, {1}), labels = index_tensor({0, 1, 2, 3}, {4});
  BOOST_TEST(allclose(mean(cross_entropy_per_example(flat, labels)), cross_entropy(flat, labels), 1e-14, 0));
  BOOST_CHECK_THROW(cross_entropy_per_example(flat, index_tensor({0, 1, 2, 3}, {1, 4})), ShapeError);
}

BOOST_AUTO_TEST_CASE(coupled_examples_stay_exact) {
  // loss_i = l_i + 0.5 * mean_j l_j couples the examples: no op output below the losses has an
  // independent batch axis; per-sample gradients must still be d loss_i / dp exactly.
  TransformerEncoder model(small_encoder_config());
  model.to(DType::Float64);
  Rng rng(31);
  const EncoderBatch b = encoder_batch(4, 6, 7, rng);
  const auto losses = [&] {
    const Tensor l = per_example_losses(model, b);
    return add(l, mul_scalar(mean(l), 0.5));
  };
  const PerSampleGradients fast = per_sample_gradients(model, losses);
  PerSampleOptions loop_opt;
  loop_opt.method = PerSampleMethod::Loop;
  const PerSampleGradients loop = per_sample_gradients(model, losses, loop_opt);
  for (std::size_t k = 0; k < fast.grads.size(); ++k)
    BOOST_TEST(allclose(fast.grads[k].second, loop.grads[k].second, 1e-10, 1e-12), fast.grads[k].first);
}

BOOST_AUTO_TEST_CASE(weak_batch_coupling_is_not_taken_for_rounding) {
  // loss_i = |z_i - c mean_j z_j|^2, z = linear(x, W): c = 1e-4 in float32 and 1e-9 in float64
  // passed the old fixed check (1e-3 / 1e-7 relative) as "linear", 3.4e-5 / 3.4e-10 off.
  for (const auto& [dt, c] : {std::pair{DType::Float32, 1e-4}, std::pair{DType::Float64, 1e-9}}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Rng r(5);
      Tensor W = randn({3, 3}, r, dt);
      W.set_requires_grad();
      const Tensor x = randn({6, 3}, r, dt);
      const auto losses = [&, c = c] {
        const Tensor z = linear(x, W), z2 = sub(z, mul_scalar(mean(z, {0}, true), c));
        return sum(mul(z2, z2), {1});
      };
      const PerSampleGradients fast = per_sample_gradients({{"W", W}}, losses);
      PerSampleOptions lo;
      lo.method = PerSampleMethod::Loop;
      const PerSampleGradients loop = per_sample_gradients({{"W", W}}, losses, lo);
      BOOST_TEST(fast.methods[0] != "linear");
      const double tol = dt == DType::Float32 ? 1e-6 : 1e-14;
      BOOST_TEST(allclose(fast.grads[0].second, loop.grads[0].second, tol, tol));
    }
  }
  // A genuine per-example model keeps its fast methods in float32.
  TransformerEncoder model(small_encoder_config());
  Rng rng(17);
  const EncoderBatch b = encoder_batch(5, 6, 7, rng);
  const PerSampleGradients g = per_sample_gradients(
      model, [&] { return cross_entropy_per_example(model.forward(b.tokens, b.padding), b.all_targets); });
  for (std::size_t k = 0; k < g.methods.size(); ++k) BOOST_TEST(g.methods[k] != "loop", g.grads[k].first);
}

BOOST_AUTO_TEST_CASE(linear_regression_closed_form) {
  // loss_i = 0.5 |W x_i + b - y_i|^2: grad W_i = r_i x_i^T, grad b_i = r_i.
  Rng rng(13);
  Linear lin(3, 2, true, rng);
  lin.to(DType::Float64);
  const Tensor x = randn64({4, 3}, rng), y = randn64({4, 2}, rng);
  const PerSampleGradients g =
      per_sample_gradients(lin, [&] { return mul_scalar(sum(pow(sub(lin.forward(x), y), 2.0), {1}), 0.5); });
  BOOST_TEST(g.methods[0] == "linear");
  BOOST_TEST(g.methods[1] == "linear");
  const auto r = sub(lin.forward(x), y).to_vector(), xv = x.to_vector();
  std::vector<double> gw;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t o = 0; o < 2; ++o)
      for (std::size_t c = 0; c < 3; ++c) gw.push_back(r[i * 2 + o] * xv[i * 3 + c]);
  BOOST_TEST((g.grads[0].second.shape() == Shape{4, 2, 3}));
  BOOST_TEST(allclose(g.grads[0].second, gw, 1e-13, 1e-14));
  BOOST_TEST(allclose(g.grads[1].second, r, 1e-13, 1e-14));
}

BOOST_AUTO_TEST_CASE(bad_inputs) {
  Rng rng(14);
  Linear lin(3, 2, true, rng);
  lin.to(DType::Float64);
  const Tensor x = randn64({4, 3}, rng);
  expect_error<ShapeError>([&] { per_sample_gradients(lin, [&] { return sum(lin.forward(x)); }); },
                           "per_sample_gradients: the loss function must return one loss per example, a (B) tensor with B >= 1; it returned () float64");
  expect_error<ShapeError>([&] { per_sample_gradients(lin, [&] { return lin.forward(x); }); }, "it returned (4, 2) float64");
  expect_error<DTypeError>([&] { per_sample_gradients(lin, [&] { return Tensor(); }); }, "must return a float (B) tensor");
  Tensor extra = zeros({5}, DType::Float64);
  extra.set_requires_grad();
  NamedTensors params = lin.named_parameters();
  params.emplace_back("extra", extra);
  const auto losses = [&] { return sum(lin.forward(x), {1}); };
  expect_error<GraphError>([&] { per_sample_gradients(params, losses); },
                           "per_sample_gradients: parameter 'extra' (5) float64 is not used to compute the losses (pass allow_unused for zeros)");
  PerSampleOptions o;
  o.allow_unused = true;
  const PerSampleGradients g = per_sample_gradients(params, losses, o);
  BOOST_TEST(g.methods[2] == "unused");
  BOOST_TEST(allclose(g.grads[2].second, std::vector<double>(20, 0.0), 0, 0));
  expect_error<GraphError>([&] { per_sample_gradients({{"x", x}}, losses); }, "parameter 'x' (4, 3) float64 must be a leaf that requires grad");
  expect_error<ValueError>([&] { per_sample_gradients({{"a", lin.weight}, {"b", lin.weight}}, losses); }, "parameter 'b' is given twice");
  // Losses that are a parameter: d p_i / d p is row i of the identity (a GraphError "not used" before).
  Tensor p = test::f64({1, 2, 3}, {3});
  p.set_requires_grad();
  for (const PerSampleMethod m : {PerSampleMethod::Auto, PerSampleMethod::Loop}) {
    PerSampleOptions pm;
    pm.method = m;
    const PerSampleGradients id = per_sample_gradients({{"p", p}}, [&] { return p; }, pm);
    BOOST_TEST(id.methods[0] == "loop");
    BOOST_TEST(allclose(id.grads[0].second, {1, 0, 0, 0, 1, 0, 0, 0, 1}, 0, 0));
  }
  o.max_bytes = 100;
  expect_error<MemoryError>([&] { per_sample_gradients(lin, losses, o); },
                            "per_sample_gradients: the per-sample gradients (2 blocks: (4, 2, 3) float64, (4, 2) float64) needs 256 bytes, more than the limit of 100");
}

BOOST_AUTO_TEST_SUITE_END()
