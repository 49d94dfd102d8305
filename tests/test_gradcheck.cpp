// gradcheck's holes, each with a deliberately wrong op and a correct control: NaN / inf in a
// backward (first and second order), functions undefined at or near the sample, and a fused
// first-order backward that disagrees with its create_graph backward.
#include <limits>

#include "expect_error.hpp"
#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::expect_error;
using test::leaf;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// y = x^2, dx = 2 x g, with element `bad` of dx replaced by `value` (none when bad < 0).
// The poked gradient is detached: use it where it is not differentiated again.
Tensor square_poked(const Tensor& x, long bad, double value) {
  Tensor y = mul(x.detach(), x.detach());
  return record("square_poked", y, {x}, [bad, value](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    Tensor dx = mul(g, mul_scalar(n.input(0), 2.0));
    if (bad < 0) return {dx};
    dx = dx.detach().clone();
    dx.mutable_data<double>()[bad] = value;
    return {dx};
  });
}

// y = x^3, dx = 3 g square_poked(x): the first-order gradient is right, the second has
// `value` at element `bad`.
Tensor cube(const Tensor& x, long bad, double value) {
  Tensor y = mul(x.detach(), mul(x.detach(), x.detach()));
  return record("cube", y, {x}, [bad, value](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {mul(g, mul_scalar(square_poked(n.input(0), bad, value), 3.0))};
  });
}

// y = x^2 recorded with two backwards (record_fused): the first-order one and the
// differentiable one (create_graph), each scaled at element `bad` by its own factor.
Tensor square_two_paths(const Tensor& x, long bad, double fused_scale, double graph_scale) {
  Tensor y = mul(x.detach(), x.detach());
  auto scaled = [bad](double s) {
    return [bad, s](const Node& n, const Tensor& g) -> std::vector<Tensor> {
      Tensor dx = mul(g, mul_scalar(n.input(0), 2.0));
      if (bad < 0 || s == 1.0) return {dx};
      std::vector<double> scale(dx.numel(), 1.0);
      scale[std::size_t(bad)] = s;
      return {mul(dx, tensor(scale, dx.shape(), DType::Float64))};
    };
  };
  return record_fused("square_two_paths", y, {x}, scaled(fused_scale), scaled(graph_scale));
}

// y = x^2 whose backward is 4 x g: wrong by a factor 2 everywhere.
Tensor square_twice_wrong(const Tensor& x) {
  Tensor y = mul(x.detach(), x.detach());
  return record("square_twice_wrong", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {mul(g, mul_scalar(n.input(0), 4.0))};
  });
}

// The three checks, by name, for tests that hold for each.
using Check = GradcheckResult (*)(const TensorFn&, const std::vector<Tensor>&, const GradcheckOptions&);
const std::vector<std::pair<std::string, Check>> kChecks = {
    {"gradcheck", gradcheck}, {"gradgradcheck", gradgradcheck}, {"check_fused_backward", check_fused_backward}};

TensorFn poked(long bad, double value) {
  return [=](const std::vector<Tensor>& in) { return square_poked(in[0], bad, value); };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradcheck_holes)

BOOST_AUTO_TEST_CASE(nan_in_backward_fails_naming_op_input_and_element) {
  const std::vector<Tensor> x = {leaf({1, -2, 0.5, 3}, {2, 2})};
  BOOST_TEST(gradcheck(poked(-1, 0), x, {"square"}).ok);
  auto r = gradcheck(poked(2, kNaN), x, {"nan_square"});
  BOOST_TEST(!r.ok);
  BOOST_TEST(has(r.message, "gradcheck(nan_square)"), r.message);
  BOOST_TEST(has(r.message, "input 0 (2, 2) element [1, 0] (flat 2)"), r.message);
  BOOST_TEST(has(r.message, "analytic nan vs numeric "), r.message);
  BOOST_TEST(std::isinf(r.max_abs_error));
  auto r2 = gradgradcheck(poked(2, kNaN), x, {"nan_square"});
  BOOST_TEST(!r2.ok);
  BOOST_TEST(has(r2.message, "gradgradcheck(nan_square)"), r2.message);
  BOOST_TEST(has(r2.message, "input 0 (2, 2) element [1, 0] (flat 2) is nan"), r2.message);
}

BOOST_AUTO_TEST_CASE(inf_in_backward_fails_naming_op_input_and_element) {
  // Second input: the failing element is found in input 1, after a correct input 0.
  TensorFn f = [](const std::vector<Tensor>& in) { return add(mul(in[0], in[0]), square_poked(in[1], 3, kInf)); };
  TensorFn ok = [](const std::vector<Tensor>& in) { return add(mul(in[0], in[0]), square_poked(in[1], -1, 0)); };
  const std::vector<Tensor> x = {leaf({1, 2, 3, 4}, {4}), leaf({0.5, -1, 1.5, 2}, {4})};
  BOOST_TEST(gradcheck(ok, x, {"sum_of_squares"}).ok);
  BOOST_TEST(gradgradcheck(ok, x, {"sum_of_squares"}).ok);
  auto r = gradcheck(f, x, {"inf_square"});
  BOOST_TEST(!r.ok);
  BOOST_TEST(has(r.message, "gradcheck(inf_square)"), r.message);
  BOOST_TEST(has(r.message, "input 1 (4) element [3] (flat 3)"), r.message);
  BOOST_TEST(has(r.message, "analytic inf vs numeric"), r.message);
  BOOST_TEST(!gradgradcheck(f, x, {"inf_square"}).ok);
}

BOOST_AUTO_TEST_CASE(nan_only_in_a_one_hot_jacobian_row_fails) {
  // dx = 2 x g * (g / g): right for a random upstream, NaN where g has zeros (full Jacobian).
  TensorFn f = [](const std::vector<Tensor>& in) {
    Tensor y = mul(in[0].detach(), in[0].detach());
    return record("square_g_over_g", y, {in[0]}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
      return {mul(mul(g, mul_scalar(n.input(0), 2.0)), div(g, g))};
    });
  };
  const std::vector<Tensor> x = {leaf({1, -2, 0.5}, {3})};
  BOOST_TEST(gradcheck(poked(-1, 0), x, {"square"}).ok);
  auto r = gradcheck(f, x, {"g_over_g"});
  BOOST_TEST(!r.ok);
  BOOST_TEST(has(r.message, "Jacobian entry"), r.message);
  BOOST_TEST(has(r.message, "analytic nan"), r.message);
}

BOOST_AUTO_TEST_CASE(nan_only_in_second_order_fails_gradgradcheck) {
  TensorFn good = [](const std::vector<Tensor>& in) { return cube(in[0], -1, 0); };
  TensorFn bad = [](const std::vector<Tensor>& in) { return cube(in[0], 1, kNaN); };
  const std::vector<Tensor> x = {leaf({0.7, -1.2, 1.5, 0.4}, {4})};
  BOOST_TEST(gradcheck(good, x, {"cube"}).ok);
  BOOST_TEST(gradgradcheck(good, x, {"cube"}).ok);
  BOOST_TEST(gradcheck(bad, x, {"cube_nan2"}).ok);  // the first order is right
  auto r = gradgradcheck(bad, x, {"cube_nan2"});
  BOOST_TEST(!r.ok);
  BOOST_TEST(has(r.message, "cube_nan2 second order"), r.message);
  BOOST_TEST(has(r.message, "input 0 (4) element [1] (flat 1)"), r.message);
  BOOST_TEST(has(r.message, "analytic nan"), r.message);
}

BOOST_AUTO_TEST_CASE(log_at_negative_inputs_fails) {
  TensorFn f = [](const std::vector<Tensor>& in) { return log(in[0]); };
  BOOST_TEST(gradcheck(f, {leaf({0.3, 0.5, 2}, {3})}, {"log"}).ok);
  BOOST_TEST(gradgradcheck(f, {leaf({0.3, 0.5, 2}, {3})}, {"log"}).ok);
  for (const auto& x : {leaf({0.3, -1, 2}, {3}), leaf({0.3, 0, 2}, {3})}) {
    auto r = gradcheck(f, {x}, {"log"});
    BOOST_TEST(!r.ok);
    BOOST_TEST(has(r.message, "gradcheck(log): forward output element [1] (flat 1) is"), r.message);
    BOOST_TEST(!gradgradcheck(f, {x}, {"log"}).ok);
  }
}

BOOST_AUTO_TEST_CASE(function_undefined_within_eps_of_the_sample_fails) {
  // sqrt at 1e-7 is finite, at 1e-7 - eps it is NaN: central differences straddle the edge.
  TensorFn f = [](const std::vector<Tensor>& in) { return sqrt(in[0]); };
  BOOST_TEST(gradcheck(f, {leaf({1e-2, 1, 2}, {3})}, {"sqrt"}).ok);
  auto r = gradcheck(f, {leaf({1, 1e-7, 2}, {3})}, {"sqrt"});
  BOOST_TEST(!r.ok);
  BOOST_TEST(has(r.message, "f(x - eps) at input 0 (3) element [1] (flat 1)"), r.message);
  BOOST_TEST(has(r.message, "undefined or not finite near the sample"), r.message);
}

BOOST_AUTO_TEST_CASE(nonfinite_forward_at_the_sample_fails) {
  TensorFn ratio = [](const std::vector<Tensor>& in) { return div(in[0], add_scalar(in[0], -1.0)); };
  TensorFn self_ratio = [](const std::vector<Tensor>& in) { return div(in[0], in[0]); };
  BOOST_TEST(gradcheck(ratio, {leaf({2, 3, -0.5}, {3})}, {"ratio"}).ok);
  auto inf = gradcheck(ratio, {leaf({2, 1, -0.5}, {3})}, {"ratio"});  // 1 / 0
  BOOST_TEST(!inf.ok);
  BOOST_TEST(has(inf.message, "forward output element [1] (flat 1) is inf"), inf.message);
  BOOST_TEST(std::isinf(inf.max_abs_error));
  auto nan = gradgradcheck(self_ratio, {leaf({2, 0, -0.5}, {3})}, {"self_ratio"});  // 0 / 0
  BOOST_TEST(!nan.ok);
  BOOST_TEST(has(nan.message, "gradgradcheck(self_ratio): forward output element [1] (flat 1) is nan"),
             nan.message);
}

BOOST_AUTO_TEST_CASE(fused_backward_differing_from_create_graph_backward_fails) {
  auto two_paths = [](long bad, double fused, double graph) -> TensorFn {
    return [=](const std::vector<Tensor>& in) { return square_two_paths(in[0], bad, fused, graph); };
  };
  const std::vector<Tensor> x = {leaf({1, -2, 0.5, 3, 1.5, -0.7}, {2, 3})};
  auto ok = check_fused_backward(two_paths(-1, 1, 1), x, {"square"});
  BOOST_TEST(ok.ok, ok.message);
  BOOST_TEST(ok.max_abs_error == 0.0);

  // Fused path 1e-7 off at one element: inside gradcheck's tolerance, not float64 rounding.
  TensorFn slightly = two_paths(4, 1 + 1e-7, 1);
  BOOST_TEST(gradcheck(slightly, x, {"slightly"}).ok);
  BOOST_TEST(gradgradcheck(slightly, x, {"slightly"}).ok);
  auto r = check_fused_backward(slightly, x, {"slightly"});
  BOOST_TEST(!r.ok);
  BOOST_TEST(has(r.message, "check_fused_backward(slightly): input 0 (2, 3) element [1, 1] (flat 4)"), r.message);
  BOOST_TEST(has(r.message, "first-order backward"), r.message);
  BOOST_TEST(has(r.message, "create_graph backward"), r.message);

  // create_graph path 2x off: self-consistent, so gradgradcheck cannot see it either.
  TensorFn graph_wrong = two_paths(0, 1, 2);
  BOOST_TEST(gradcheck(graph_wrong, x, {"graph_wrong"}).ok);
  BOOST_TEST(gradgradcheck(graph_wrong, x, {"graph_wrong"}).ok);
  auto r2 = check_fused_backward(graph_wrong, x, {"graph_wrong"});
  BOOST_TEST(!r2.ok);
  BOOST_TEST(has(r2.message, "element [0, 0] (flat 0)"), r2.message);

  // A NaN in either path fails too.
  BOOST_TEST(!check_fused_backward(two_paths(2, kNaN, 1), x, {"nan_fused"}).ok);
}

BOOST_AUTO_TEST_CASE(tolerances_and_eps_out_of_range_are_value_errors) {
  // A backward 2x off passed with rtol = NaN, atol = inf or negative tolerances before.
  const TensorFn wrong = [](const std::vector<Tensor>& in) { return square_twice_wrong(in[0]); };
  const std::vector<Tensor> x = {leaf({0.5, -1.5, 2}, {3})};
  BOOST_TEST(!gradcheck(wrong, x).ok);
  GradcheckOptions exact;
  exact.atol = exact.rtol = 0;  // allowed: exact agreement required
  BOOST_TEST(!gradcheck(wrong, x, exact).ok);
  const double kBad[] = {kNaN, kInf, -kInf, -1e-5};
  for (const auto& [who, check_fn] : kChecks)
    for (const char* option : {"eps", "atol", "rtol", "fused_rtol"})
      for (double bad : kBad) {
        GradcheckOptions o;
        if (std::string(option) == "eps") o.eps = bad;
        if (std::string(option) == "atol") o.atol = bad;
        if (std::string(option) == "rtol") o.rtol = bad;
        if (std::string(option) == "fused_rtol") o.fused_rtol = bad;
        BOOST_TEST_CONTEXT(who << " " << option << " = " << bad) {
          const std::string bound = std::string(option) == "eps" ? "> 0" : ">= 0";
          expect_error<ValueError>([&, check = check_fn] { check(wrong, x, o); },
                                   {who + "(f): option " + option + " must be finite and " + bound + ", got "});
        }
      }
  for (const auto& [who, check_fn] : kChecks) {
    GradcheckOptions o;
    o.eps = 0;
    expect_error<ValueError>([&, check = check_fn] { check(wrong, x, o); }, {who + "(f): option eps must be finite and > 0, got 0"});
    o.eps = 1e-6;
    o.rtol = kNaN;
    expect_error<ValueError>([&, check = check_fn] { check(wrong, x, o); }, {who + "(f): option rtol must be finite and >= 0, got nan"});
  }
}

BOOST_AUTO_TEST_CASE(the_same_tensor_in_two_slots_is_two_variables) {
  // mul(a, a) given {a, a}: each slot's gradient is the other slot's value, and every check
  // perturbs one slot at a time; the checks failed a correct op before.
  const Tensor a = leaf({0.5, -1.5, 2}, {3});
  const TensorFn f = [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); };
  for (const auto& [who, check_fn] : kChecks) {
    const GradcheckResult r = check_fn(f, {a, a}, {});
    BOOST_TEST(r.ok, who << ": " << r.message);
  }
  // A wrong op still fails with aliased slots, and nothing is written to the caller's tensor.
  const TensorFn wrong = [](const std::vector<Tensor>& in) { return mul(in[0], square_twice_wrong(in[1])); };
  BOOST_TEST(!gradcheck(wrong, {a, a}).ok);
  BOOST_TEST(!a.grad().defined());
}

BOOST_AUTO_TEST_CASE(an_empty_function_is_a_value_error) {
  const std::vector<Tensor> x = {leaf({1, 2}, {2})};
  for (const auto& [who, check_fn] : kChecks)
    expect_error<ValueError>([&, check = check_fn] { check(TensorFn(), x, {}); }, {who + "(f): no function given"});
}

BOOST_AUTO_TEST_CASE(every_check_requires_a_defined_float64_output) {
  const std::vector<Tensor> x = {leaf({1, 2}, {2})};
  const TensorFn to32 = [](const std::vector<Tensor>& in) { return in[0].to(DType::Float32); };
  const TensorFn undefined = [](const std::vector<Tensor>&) { return Tensor(); };
  const TensorFn to_int = [](const std::vector<Tensor>& in) { return argmax(in[0], 0); };
  for (const auto& [who, check_fn] : kChecks) {
    BOOST_TEST_CONTEXT(who) {
      expect_error<DTypeError>([&, check = check_fn] { check(to32, x, {}); }, {who + "(f): f must return a float64 tensor, got (2) float32"});
      expect_error<DTypeError>([&, check = check_fn] { check(to_int, x, {}); }, {who + "(f): f must return a float64 tensor, got () int64"});
      expect_error<ValueError>([&, check = check_fn] { check(undefined, x, {}); }, {who + "(f): f returned an undefined tensor"});
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
