// Tanh-approximate GELU, gelu(x, GeluApproximation::Tanh):
//   y = 0.5 x (1 + tanh(c (x + a x^3))),  c = sqrt(2 / pi), a = 0.044715
// against PyTorch 1.13's F.gelu(x, approximate='tanh') (fixture gelu_tanh, written by
// tools/make_fixtures.py: float32 and float64 values and gradients of sum(y * upstream)), against
// the formula evaluated in long double, and against the same formula composed of xgrad's own
// differentiable ops (another code path for both the value and, through autograd, the gradient).
// Gradients (first and second order) are also checked by the registry ("gelu(tanh)").
#include <cmath>
#include <string>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/unary.hpp"

#ifndef XGRAD_FIXTURE_DIR
#error "XGRAD_FIXTURE_DIR must name the directory of the golden fixtures"
#endif

using namespace xgrad;
using test::allclose;

namespace {

constexpr long double kC = 0.797884560802865355879892119868763737L;  // sqrt(2 / pi)
constexpr long double kA = 0.044715L;

const Tensor& find(const SafetensorsFile& f, const std::string& name) {
  for (const auto& [key, t] : f.tensors)
    if (key == name) return t;
  throw ValueError("gelu_tanh fixture: no tensor '" + name + "'");
}

SafetensorsFile fixture() { return load_safetensors(std::string(XGRAD_FIXTURE_DIR) + "/gelu_tanh.safetensors"); }

// The formula in xgrad's elementwise ops.
Tensor composite_gelu_tanh(const Tensor& x) {
  Tensor inner = mul_scalar(add(x, mul_scalar(mul(x, mul(x, x)), double(kA))), double(kC));
  return mul(mul_scalar(x, 0.5), add_scalar(tanh(inner), 1.0));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gelu_tanh)

// Tolerances: float64 |x - t| <= 1e-14 + 1e-12 |t| (both evaluate one tanh and a few
// products, a few ulps apart); float32 |x - t| <= 1e-6 + 1e-5 |t| (the golden tests' kAtol and
// kRtol: the gradient crosses zero at x = -0.7518, where its two terms of size ~0.3 cancel).
BOOST_AUTO_TEST_CASE(matches_pytorch_in_float32_and_float64) {
  const SafetensorsFile f = fixture();
  BOOST_TEST_REQUIRE(f.metadata.at("kind") == "gelu");
  BOOST_TEST_REQUIRE(f.metadata.at("approximate") == "tanh");
  for (const char* suffix : {".f32", ".f64"}) {
    BOOST_TEST_CONTEXT("dtype " << suffix) {
      const bool f64 = std::string(suffix) == ".f64";
      const double rtol = f64 ? 1e-12 : 1e-5, atol = f64 ? 1e-14 : 1e-6;
      Tensor x = find(f, std::string("x") + suffix).clone();
      BOOST_TEST_REQUIRE((x.dtype() == (f64 ? DType::Float64 : DType::Float32)));
      x.set_requires_grad(true);
      Tensor y = gelu(x, GeluApproximation::Tanh);
      BOOST_TEST(y.dtype() == x.dtype());
      BOOST_TEST(allclose(y, find(f, std::string("output") + suffix), rtol, atol));
      backward({y}, {find(f, std::string("upstream") + suffix)});
      BOOST_TEST(allclose(x.grad(), find(f, std::string("grad.x") + suffix), rtol, atol));
    }
  }
}

// Forward against the formula in long double. For x << 0, 1 + tanh(u) cancels in float64 (as
// in PyTorch): the error is then absolute, a few ulps of 1 times |x| / 2 <= 4, so the bound is
// 1e-14 relative + 4e-15 absolute.
BOOST_AUTO_TEST_CASE(matches_the_formula_in_long_double) {
  const std::vector<double> xs = find(fixture(), "x.f64").to_vector();
  Tensor y = gelu(test::f64(xs, {xs.size()}), GeluApproximation::Tanh);
  std::vector<double> ref(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const long double v = xs[i];
    ref[i] = double(0.5L * v * (1.0L + std::tanh(kC * (v + kA * v * v * v))));
  }
  BOOST_TEST(allclose(y, ref, 1e-14, 4e-15));
  // Values a reader can check by hand: gelu_tanh(0) = 0, gelu_tanh(1) = 0.8411919906082768.
  BOOST_TEST(allclose(gelu(test::f64({0.0, 1.0}, {2}), GeluApproximation::Tanh), {0.0, 0.8411919906082768}, 1e-15));
}

// The fused kernel (value and first-order slope) against the formula in xgrad ops, whose
// gradient autograd derives through tanh, mul and add; and the default is still the erf form.
BOOST_AUTO_TEST_CASE(fused_kernel_matches_the_composed_formula) {
  Tensor x1 = test::leaf(test::vals(200, 5, -6.0, 6.0), {8, 25});
  Tensor x2 = test::leaf(x1.to_vector(), {8, 25});
  Tensor u = test::f64(test::vals(200, 6), {8, 25});
  Tensor y1 = gelu(x1, GeluApproximation::Tanh), y2 = composite_gelu_tanh(x2);
  BOOST_TEST(allclose(y1, y2, 1e-14, 1e-15));
  backward({y1}, {u});
  backward({y2}, {u});
  BOOST_TEST(allclose(x1.grad(), x2.grad(), 1e-13, 1e-14));
  // The two GELUs differ (by at most ~5e-4 on this range), and gelu(x) is the exact one.
  Tensor exact = gelu(x1.detach());
  BOOST_TEST(allclose(exact, gelu(x1.detach(), GeluApproximation::None), 0, 0));
  BOOST_TEST(!allclose(exact, y1.detach(), 1e-6, 1e-9));
  BOOST_TEST(allclose(exact, y1.detach(), 0, 1e-3));
}

// Far from 0 GELU is x or 0, its slope 1 or 0 and its second derivative 0, in both forms and
// both float types: no NaN from x^2 overflowing (|x| >~ 1e19 in float32) times a factor that
// is exactly 0 there, in the first-order kernel or the create_graph backward.
BOOST_AUTO_TEST_CASE(huge_inputs_give_finite_slopes_and_second_derivatives) {
  for (const DType dt : {DType::Float32, DType::Float64})
    for (const GeluApproximation form : {GeluApproximation::Tanh, GeluApproximation::None}) {
      BOOST_TEST_CONTEXT(dtype_name(dt) << (form == GeluApproximation::Tanh ? " tanh" : " exact")) {
        Tensor x = tensor({1e4, -1e4, 1e20, -1e20, 3e38, -3e38}, {6}, dt).set_requires_grad();
        const Tensor slope = grad({sum(gelu(x, form))}, {x}, {}, GradOptions{true, true, false})[0];
        BOOST_TEST(allclose(slope, {1, 0, 1, 0, 1, 0}, 0, 0));
        BOOST_TEST(allclose(grad({sum(slope)}, {x})[0], {0, 0, 0, 0, 0, 0}, 0, 0));
        Tensor y = x.detach().set_requires_grad();
        sum(gelu(y, form)).backward();  // the fused first-order kernel
        BOOST_TEST(allclose(y.grad(), {1, 0, 1, 0, 1, 0}, 0, 0));
      }
    }
}

BOOST_AUTO_TEST_CASE(rejects_non_float_input_naming_the_op) {
  BOOST_CHECK_EXCEPTION(gelu(zeros({2}, DType::Int64), GeluApproximation::Tanh), DTypeError,
                        [](const DTypeError& e) { return std::string(e.what()).rfind("gelu:", 0) == 0; });
}

BOOST_AUTO_TEST_SUITE_END()
