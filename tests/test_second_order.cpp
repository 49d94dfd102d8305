// Second order: derivatives of derivatives through create_graph.
#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/registry.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::allclose;
using test::leaf;

BOOST_AUTO_TEST_SUITE(second_order)

BOOST_AUTO_TEST_CASE(second_derivative_of_cube) {
  Tensor x = leaf({-1, 0.5, 2}, {3});
  Tensor y = sum(pow(x, 3));
  Tensor g = grad({y}, {x}, {}, GradOptions{false, true, false})[0];  // 3x^2
  BOOST_TEST(allclose(g, {3, 0.75, 12}));
  BOOST_TEST(g.requires_grad());
  Tensor h = grad({sum(g)}, {x})[0];  // 6x
  BOOST_TEST(allclose(h, {-6, 3, 12}));
}

// f(x, W) = sum(softmax(tanh(x W^T)) * c): exercises matmul, tanh, softmax second order.
static Tensor f(const Tensor& x, const Tensor& w, const Tensor& c) {
  return sum(mul(softmax(tanh(matmul(x, w, false, true)), -1), c));
}

BOOST_AUTO_TEST_CASE(hessian_vector_product_matches_finite_differences_of_gradient) {
  Rng rng(3);
  Tensor x = randn({2, 3}, rng, DType::Float64).set_requires_grad();
  Tensor w = randn({4, 3}, rng, DType::Float64);
  Tensor c = randn({2, 4}, rng, DType::Float64);
  Tensor v = randn({2, 3}, rng, DType::Float64);

  // Hv = d/dx <grad f(x), v>
  Tensor gx = grad({f(x, w, c)}, {x}, {}, GradOptions{false, true, false})[0];
  Tensor hv = grad({sum(mul(gx, v))}, {x})[0];

  // (grad f(x + eps v) - grad f(x - eps v)) / 2 eps
  const double eps = 1e-5;
  auto grad_at = [&](double s) {
    Tensor xs = add(x.detach(), mul_scalar(v, s)).detach().set_requires_grad();
    return grad({f(xs, w, c)}, {xs})[0];
  };
  Tensor fd = mul_scalar(sub(grad_at(eps), grad_at(-eps)), 1.0 / (2 * eps));
  BOOST_TEST(allclose(hv, fd, 1e-6, 1e-8));
  BOOST_TEST(test::all_finite(hv));
}

BOOST_AUTO_TEST_CASE(gradient_penalty_is_differentiable_in_the_parameters) {
  // P(w) = || d f / d x ||^2 ; check dP/dw with gradcheck (itself a second-order quantity).
  Rng rng(5);
  Tensor x = randn({2, 3}, rng, DType::Float64).set_requires_grad();
  Tensor c = randn({2, 4}, rng, DType::Float64);
  TensorFn penalty = [&](const std::vector<Tensor>& in) {
    Tensor xs = x.detach().set_requires_grad();
    Tensor g = grad({f(xs, in[0], c)}, {xs}, {}, GradOptions{false, true, false})[0];
    return sum(mul(g, g));
  };
  Tensor w = randn({4, 3}, rng, DType::Float64).set_requires_grad();
  auto r = gradcheck(penalty, {w}, {"gradient_penalty"});
  BOOST_TEST(r.ok, r.message);
}

BOOST_AUTO_TEST_CASE(gradgradcheck_of_a_composite) {
  Rng rng(9);
  TensorFn comp = [](const std::vector<Tensor>& in) {
    return log_softmax(gelu(linear(in[0], in[1], in[2])), -1);
  };
  auto r = gradgradcheck(comp, {sample_randn({2, 3}, rng), sample_randn({4, 3}, rng),
                                sample_randn({4}, rng)}, {"linear-gelu-log_softmax"});
  BOOST_TEST(r.ok, r.message);
}

BOOST_AUTO_TEST_SUITE_END()
