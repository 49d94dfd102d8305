// Anomaly mode: the first op that turns finite inputs into NaN/inf is named, in forward and
// in backward; nothing is checked when the mode is off.
#include <limits>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;

BOOST_AUTO_TEST_SUITE(anomaly)

static auto mentions(std::vector<std::string> parts) {
  return [parts](const AnomalyError& e) {
    const std::string m = e.what();
    for (const auto& p : parts)
      if (m.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("message lacks '" << p << "': " << m);
        return false;
      }
    return true;
  };
}

BOOST_AUTO_TEST_CASE(off_by_default) {
  BOOST_TEST(!is_anomaly_enabled());
  Tensor y = log(test::f64({0, 1}, {2}));
  BOOST_TEST(std::isinf(y.to_vector()[0]));
}

BOOST_AUTO_TEST_CASE(forward_names_the_first_op_and_input_shapes) {
  AnomalyModeGuard on;
  Tensor x = test::leaf({1, 2, 0, 4}, {2, 2});
  Tensor h = mul_scalar(x, 2.0);  // finite
  BOOST_CHECK_EXCEPTION(log(h), AnomalyError, mentions({"'log'", "forward", "inf", "(2, 2)", "flat index 2"}));
  BOOST_CHECK_EXCEPTION(sqrt(test::f64({-1.0}, {1})), AnomalyError, mentions({"'sqrt'", "NaN", "(1)"}));
  BOOST_CHECK_EXCEPTION(exp(tensor({100.0}, {1}, DType::Float32)), AnomalyError, mentions({"'exp'", "float32"}));
  BOOST_CHECK_EXCEPTION(div(test::f64({1, 2}, {2}), test::f64({1, 0}, {2})), AnomalyError,
                        mentions({"'div'", "input 0 (2) float64", "input 1 (2) float64"}));
}

BOOST_AUTO_TEST_CASE(backward_names_the_op_being_differentiated) {
  AnomalyModeGuard on;
  Tensor x = test::leaf({0.0, 4.0}, {2});
  Tensor y = sum(sqrt(x));  // forward finite: sqrt(0) = 0; backward 0.5 / sqrt(0) = inf
  BOOST_CHECK_EXCEPTION(y.backward(), AnomalyError, mentions({"backward of 'sqrt'", "inf"}));
}

BOOST_AUTO_TEST_CASE(nonfinite_inputs_and_requested_fills_are_not_anomalies) {
  AnomalyModeGuard on;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor s = test::leaf({1, 2, 3, 4}, {2, 2});
  Tensor mask = bool_tensor({true, false, true, true}, {2, 2});
  Tensor filled = masked_fill(s, mask, -inf);           // requested -inf: allowed
  Tensor p = softmax(filled, -1);                       // finite, fully masked row -> zeros
  Tensor q = add_scalar(filled, 1.0);                   // -inf from -inf input: not the first
  sum(mul(p, test::f64({1, 2, 3, 4}, {2, 2}))).backward();
  BOOST_TEST(test::all_finite(s.grad()));
  BOOST_TEST(std::isinf(q.to_vector()[0]));
  // Masked attention with anomaly mode on runs clean end to end.
  Tensor scores = test::leaf({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {1, 2, 3});
  Tensor pm = masked_softmax(scores, bool_tensor({true, true, true, false, true, false}, {2, 3}), -1);
  sum(mul(pm, pm)).backward();
  BOOST_TEST(test::all_finite(scores.grad()));
}

BOOST_AUTO_TEST_SUITE_END()
