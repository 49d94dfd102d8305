// Fully masked rows: finite outputs and gradients, zeros where masked, no NaN anywhere.
#include <limits>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/softmax.hpp"

using namespace xgrad;
using test::allclose;
using test::all_finite;

BOOST_AUTO_TEST_SUITE(masking)

// scores (1, 3, 4) from a shared weight, so one NaN row would poison its whole gradient.
struct Attention {
  Rng rng{11};
  Tensor x = randn({1, 3, 4}, rng, DType::Float64);
  Tensor w = randn({4, 4}, rng, DType::Float64).set_requires_grad();
  Tensor scores() { return matmul(linear(x, w), x, false, true); }  // (1, 3, 3)
};

BOOST_AUTO_TEST_CASE(masked_softmax_fully_masked_row_is_zero_with_finite_gradients) {
  Attention a;
  Tensor mask = bool_tensor({false, true, false, true, true, true, false, false, false}, {3, 3});
  Tensor p = masked_softmax(a.scores(), mask, -1);
  auto pv = p.to_vector();
  BOOST_TEST(all_finite(p));
  for (int j = 0; j < 3; ++j) BOOST_TEST(pv[3 + j] == 0.0);   // row 1 fully masked
  BOOST_TEST(pv[1] == 0.0);                                     // masked entry
  BOOST_TEST(pv[0] + pv[2] == 1.0, boost::test_tools::tolerance(1e-12));
  Rng rng(1);
  Tensor up = randn(p.shape(), rng, DType::Float64);
  Tensor s = a.scores();
  Tensor ps = masked_softmax(s, mask, -1);
  auto gs = grad({ps}, {s, a.w}, {up}, GradOptions{true, false, false});
  BOOST_TEST(all_finite(gs[0]));
  BOOST_TEST(all_finite(gs[1]));
  auto gv = gs[0].to_vector();
  for (int j = 0; j < 3; ++j) BOOST_TEST(gv[3 + j] == 0.0);   // no gradient into a masked row
  BOOST_TEST(gv[1] == 0.0);
  double norm = 0;
  for (double g : gs[1].to_vector()) norm += g * g;
  BOOST_TEST(norm > 0.0);
}

BOOST_AUTO_TEST_CASE(additive_minus_infinity_mask_never_gives_nan) {
  Attention a;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor addmask = test::f64({0, -inf, 0, -inf, -inf, -inf, 0, 0, 0}, {3, 3});
  Tensor s = a.scores();
  Tensor p = softmax(add(s, addmask), -1);
  BOOST_TEST(all_finite(p));
  auto pv = p.to_vector();
  for (int j = 0; j < 3; ++j) BOOST_TEST(pv[3 + j] == 0.0);
  Rng rng(2);
  Tensor up = randn(p.shape(), rng, DType::Float64);
  auto g = grad({p}, {a.w}, {up}, GradOptions{});
  BOOST_TEST(all_finite(g[0]));
  // masked_fill with -inf is the same thing
  Tensor mask = bool_tensor({false, true, false, true, true, true, false, false, false}, {3, 3});
  Tensor p2 = softmax(masked_fill(a.scores(), mask, -inf), -1);
  BOOST_TEST(allclose(p2, p, 0, 0));
}

BOOST_AUTO_TEST_CASE(log_softmax_of_all_minus_infinity_row) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = test::leaf({-inf, -inf, 1, 2}, {2, 2});
  Tensor y = log_softmax(x, -1);
  auto v = y.to_vector();
  BOOST_TEST(std::isinf(v[0]));
  BOOST_TEST(v[0] < 0);
  BOOST_TEST(v[2] == 1 - std::log(std::exp(1.0) + std::exp(2.0)), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(fully_masked_rows_in_float32_too) {
  Tensor s = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float32).set_requires_grad();
  Tensor mask = bool_tensor({true, true, true, false, true, false}, {2, 3});
  Tensor p = masked_softmax(s, mask, -1);
  BOOST_TEST(all_finite(p));
  sum(mul(p, tensor({1, 2, 3, 4, 5, 6}, {2, 3}))).backward();
  BOOST_TEST(all_finite(s.grad()));
  BOOST_TEST(allclose(s.grad(), {0, 0, 0, s.grad().to_vector()[3], 0, s.grad().to_vector()[5]}));
}

BOOST_AUTO_TEST_SUITE_END()
