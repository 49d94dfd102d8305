// Curvature tools (framework/curvature.hpp) on quadratics 0.5 x^T A x with A = Q diag(lambda) Q^T
// of a known spectrum (Q orthonormal, built in float64): Lanczos eigenvalues and vectors,
// Hutchinson's trace, the gradient-noise scale from per-sample gradients, bad input.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "helpers.hpp"
#include "xgrad/framework/curvature.hpp"
#include "xgrad/ops/ops.hpp"

using namespace xgrad;
using xgrad::test::allclose;

namespace {

// A = Q diag(lambda) Q^T, Q from Gram-Schmidt on a seeded Gaussian matrix; row-major n x n.
struct Quadratic {
  std::size_t n;
  std::vector<double> lambda, Q, A;  // Q[i * n + j]: component i of eigenvector j
};

Quadratic quadratic(const std::vector<double>& lambda, std::uint64_t seed) {
  const std::size_t n = lambda.size();
  Quadratic q{n, lambda, std::vector<double>(n * n), std::vector<double>(n * n, 0.0)};
  Rng rng(seed);
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<double> v(n);
    for (auto& x : v) x = rng.normal();
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t k = 0; k < j; ++k) {
        double d = 0;
        for (std::size_t i = 0; i < n; ++i) d += q.Q[i * n + k] * v[i];
        for (std::size_t i = 0; i < n; ++i) v[i] -= d * q.Q[i * n + k];
      }
    double len = 0;
    for (double x : v) len += x * x;
    len = std::sqrt(len);
    for (std::size_t i = 0; i < n; ++i) q.Q[i * n + j] = v[i] / len;
  }
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < n; ++c)
      for (std::size_t k = 0; k < n; ++k) q.A[r * n + c] += q.Q[r * n + k] * lambda[k] * q.Q[c * n + k];
  return q;
}

// f(x) = 0.5 x^T A x for x (n), through xgrad ops (its Hessian is A).
TensorFn quadratic_fn(const Quadratic& q) {
  const Tensor A = tensor(q.A, {q.n, q.n}, DType::Float64);
  return [A](const Tensors& in) { return mul_scalar(sum(mul(in[0], matmul(A, in[0]))), 0.5); };
}

std::vector<double> sorted_desc(std::vector<double> v) {
  std::sort(v.rbegin(), v.rend());
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(curvature)

BOOST_AUTO_TEST_CASE(hessian_operator_is_the_hessian) {
  const Quadratic q = quadratic({3, -1, 0.5, 2, 7}, 1);
  const Tensor x = tensor(test::vals(5, 2), {5}, DType::Float64);
  const HessianOperator H(quadratic_fn(q), {x});
  Rng rng(3);
  const Tensor v = randn({5}, rng, DType::Float64);
  std::vector<double> Av(5, 0.0);
  for (std::size_t r = 0; r < 5; ++r)
    for (std::size_t c = 0; c < 5; ++c) Av[r] += q.A[r * 5 + c] * v.to_vector()[c];
  BOOST_TEST(allclose(H({v})[0], Av, 1e-13, 1e-13));
  BOOST_TEST(allclose(H({v})[0], Av, 1e-13, 1e-13));  // the retained graph serves every product
  BOOST_TEST(H.products() == 2u);
  std::vector<double> Ax(5, 0.0);
  for (std::size_t r = 0; r < 5; ++r)
    for (std::size_t c = 0; c < 5; ++c) Ax[r] += q.A[r * 5 + c] * x.to_vector()[c];
  BOOST_TEST(allclose(H.gradient()[0], Ax, 1e-13, 1e-13));
  BOOST_TEST(allclose(H({v})[0], hvp(quadratic_fn(q), {x}, {v}).product[0], 1e-13, 1e-13));
  BOOST_CHECK_THROW(H({zeros({4}, DType::Float64)}), ShapeError);
}

BOOST_AUTO_TEST_CASE(lanczos_finds_the_top_of_a_known_spectrum) {
  // 60 eigenvalues: a separated top (12, 9, 7.5) above a bulk in [-1, 2] and one at -4.
  std::vector<double> lambda{12, 9, 7.5, -4};
  for (int i = 0; i < 56; ++i) lambda.push_back(-1 + 3.0 * i / 55.0);
  const Quadratic q = quadratic(lambda, 4);
  const Tensor x = tensor(test::vals(60, 5), {60}, DType::Float64);
  const HessianOperator H(quadratic_fn(q), {x});
  LanczosOptions o;
  o.k = 3;
  o.max_iterations = 40;
  o.tol = 1e-8;
  o.eigenvectors = true;
  const LanczosResult r = lanczos(H, H.inputs(), o);
  BOOST_TEST(r.converged);
  BOOST_TEST(r.iterations <= 40u);
  BOOST_TEST_MESSAGE("lanczos: top 3 of 60 in " << r.iterations << " products");
  BOOST_TEST(allclose(tensor(r.eigenvalues, {3}, DType::Float64), {12, 9, 7.5}, 1e-9, 0));
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(r.residuals[i] <= 1e-8 * 12);
    const auto y = r.eigenvectors[i][0].to_vector();
    double overlap = 0, len = 0;
    for (std::size_t c = 0; c < 60; ++c) overlap += y[c] * q.Q[c * 60 + i], len += y[c] * y[c];
    BOOST_TEST(std::abs(len - 1) < 1e-10);
    BOOST_TEST(std::abs(std::abs(overlap) - 1) < 1e-7, "eigenvector " << i << " overlap " << overlap);
  }
  BOOST_TEST(r.ritz_values.size() == r.iterations);
  // By magnitude: 12, 9, 7.5 then -4.
  o.k = 4;
  o.which = SpectrumEnd::LargestMagnitude;
  o.eigenvectors = false;
  const LanczosResult m = lanczos(H, H.inputs(), o);
  BOOST_TEST(m.converged);
  BOOST_TEST(allclose(tensor(m.eigenvalues, {4}, DType::Float64), {12, 9, 7.5, -4}, 1e-9, 0));
  // The whole spectrum when the Krylov space is the whole space.
  o.k = 60;
  o.max_iterations = 60;
  o.which = SpectrumEnd::Largest;
  const LanczosResult all = lanczos(H, H.inputs(), o);
  BOOST_TEST(allclose(tensor(all.eigenvalues, {60}, DType::Float64), sorted_desc(lambda), 1e-9, 1e-9));
}

BOOST_AUTO_TEST_CASE(lanczos_restarts_on_an_invariant_subspace) {
  // A = 2 I on (2, 3) tensors: every Krylov space has dimension 1, so k = 3 needs restarts.
  const TensorFn f = [](const Tensors& in) { return sum(mul(in[0], in[0])); };
  const HessianOperator H(f, {zeros({2, 3}, DType::Float64)});
  LanczosOptions o;
  o.k = 3;
  const LanczosResult r = lanczos(H, H.inputs(), o);
  BOOST_TEST(r.converged);
  BOOST_TEST(allclose(tensor(r.eigenvalues, {3}, DType::Float64), {2, 2, 2}, 1e-12, 0));
  BOOST_TEST(r.iterations == 3u);
}

BOOST_AUTO_TEST_CASE(lanczos_finds_every_copy_of_a_repeated_eigenvalue) {
  // diag(2, 2, 2, 1, -5): a random start spans one copy of each eigenvalue (an invariant
  // subspace of dimension 3), which held 2, 1, -5 and reported converged before.
  const Tensor D = tensor({2, 2, 2, 1, -5}, {5}, DType::Float64);
  const LinearOperator A = [&](const Tensors& v) { return Tensors{mul(v[0], D)}; };
  LanczosOptions o;
  o.k = 3;
  o.max_iterations = 5;
  const LanczosResult r = lanczos(A, {zeros({5}, DType::Float64)}, o);
  BOOST_TEST(r.converged);
  BOOST_TEST(allclose(tensor(r.eigenvalues, {3}, DType::Float64), {2, 2, 2}, 1e-12, 0));
  // One product short of the third copy: the top 3 are not known, and it says so.
  o.max_iterations = 4;
  const LanczosResult short_run = lanczos(A, {zeros({5}, DType::Float64)}, o);
  BOOST_TEST(!short_run.converged);
  BOOST_TEST(short_run.iterations == 4u);
  // By magnitude: -5 then two copies of 2.
  o.max_iterations = 5;
  o.which = SpectrumEnd::LargestMagnitude;
  const LanczosResult m = lanczos(A, {zeros({5}, DType::Float64)}, o);
  BOOST_TEST(m.converged);
  BOOST_TEST(allclose(tensor(m.eigenvalues, {3}, DType::Float64), {-5, 2, 2}, 1e-12, 0));
  // Distinct top values over a repeated bulk: one restart shows the bulk holds nothing larger.
  std::vector<double> d(50, 1.0);
  d[7] = 40, d[20] = 20, d[33] = 10;
  const Tensor big = tensor(d, {50}, DType::Float64);
  const LinearOperator B = [&](const Tensors& v) { return Tensors{mul(v[0], big)}; };
  o.which = SpectrumEnd::Largest;
  o.max_iterations = 30;
  const LanczosResult top = lanczos(B, {zeros({50}, DType::Float64)}, o);
  BOOST_TEST(top.converged);
  BOOST_TEST(allclose(tensor(top.eigenvalues, {3}, DType::Float64), {40, 20, 10}, 1e-12, 0));
  BOOST_TEST(top.iterations == 5u);
}

BOOST_AUTO_TEST_CASE(lanczos_on_several_tensors_and_float32) {
  // f(a, b) = sum(a^2 * c) + 3 sum(b^2): a diagonal Hessian spread over two inputs.
  const Tensor c = tensor({1, 5, 2, 0.5}, {2, 2}, DType::Float32);
  const TensorFn f = [c](const Tensors& in) { return add(sum(mul(mul(in[0], in[0]), c)), mul_scalar(sum(mul(in[1], in[1])), 3.0)); };
  const HessianOperator H(f, {ones({2, 2}), ones({3})});
  LanczosOptions o;
  o.k = 2;
  o.max_iterations = 7;
  const LanczosResult r = lanczos(H, H.inputs(), o);
  BOOST_TEST(allclose(tensor(r.eigenvalues, {2}, DType::Float64), {10, 6}, 1e-6, 0));
}

BOOST_AUTO_TEST_CASE(hutchinson_is_exact_on_a_diagonal_and_unbiased_on_a_rotation) {
  // Diagonal: v^T D v = tr(D) for every +-1 vector.
  const Tensor d = tensor({1, -2, 3.5, 4, 0.25}, {5}, DType::Float64);
  const TensorFn diag = [d](const Tensors& in) { return mul_scalar(sum(mul(mul(in[0], in[0]), d)), 0.5); };
  const HessianOperator D(diag, {zeros({5}, DType::Float64)});
  HutchinsonOptions o;
  o.samples = 8;
  const TraceEstimate e = hutchinson_trace(D, D.inputs(), o);
  for (double v : e.values) BOOST_TEST(std::abs(v - 6.75) < 1e-13);
  BOOST_TEST(std::abs(e.trace - 6.75) < 1e-13);
  BOOST_TEST(e.std_error < 1e-13);
  // Rotated: mean within 4 standard errors of tr(A); the estimate's spread matches the
  // Rademacher variance 2 sum_{i != j} A_ij^2.
  std::vector<double> lambda;
  for (int i = 0; i < 30; ++i) lambda.push_back(1.0 + 0.3 * i);
  const Quadratic q = quadratic(lambda, 6);
  const HessianOperator H(quadratic_fn(q), {zeros({30}, DType::Float64)});
  o.samples = 400;
  o.seed = 9;
  const TraceEstimate t = hutchinson_trace(H, H.inputs(), o);
  const double trace = std::accumulate(lambda.begin(), lambda.end(), 0.0);
  double off = 0;
  for (std::size_t r = 0; r < 30; ++r)
    for (std::size_t c = 0; c < 30; ++c)
      if (r != c) off += q.A[r * 30 + c] * q.A[r * 30 + c];
  const double sd = std::sqrt(2 * off), expected_se = sd / std::sqrt(400.0);
  BOOST_TEST_MESSAGE("hutchinson: " << t.trace << " +- " << t.std_error << " (tr A = " << trace << ", theory se "
                                    << expected_se << ")");
  BOOST_TEST(std::abs(t.trace - trace) < 4 * expected_se);
  BOOST_TEST(t.std_error > 0.8 * expected_se);
  BOOST_TEST(t.std_error < 1.25 * expected_se);
  BOOST_TEST(t.values.size() == 400u);
  // One probe: the error is unknown.
  o.samples = 1;
  BOOST_TEST(std::isinf(hutchinson_trace(H, H.inputs(), o).std_error));
}

BOOST_AUTO_TEST_CASE(noise_scale_of_per_sample_quadratics) {
  // loss_i(x) = 0.5 (x - c_i)^T A (x - c_i): g_i = A (x - c_i), G = A (x - mean c),
  // tr(Sigma) = sum_i |A (c_i - mean c)|^2 / (B - 1).
  const std::size_t n = 6, B = 9;
  const Quadratic q = quadratic({4, 3, 2, 1, 0.5, 0.25}, 7);
  const Tensor A = tensor(q.A, {n, n}, DType::Float64);
  Rng rng(8);
  const Tensor C = randn({B, n}, rng, DType::Float64);
  Tensor x = tensor(test::vals(n, 10), {n}, DType::Float64);
  x.set_requires_grad();
  const auto losses = [&] {
    const Tensor D = sub(x, C);                              // (B, n)
    return mul_scalar(sum(mul(D, matmul(D, A)), {1}), 0.5);  // (B)
  };
  const PerSampleGradients g = per_sample_gradients({{"x", x}}, losses);
  BOOST_TEST(g.methods[0] == "broadcast");  // x is broadcast over the examples by sub
  const auto c = C.to_vector(), xv = x.to_vector();
  std::vector<double> per(B * n, 0.0), cbar(n, 0.0);
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t r = 0; r < n; ++r) {
      cbar[r] += c[i * n + r] / double(B);
      for (std::size_t k = 0; k < n; ++k) per[i * n + r] += q.A[r * n + k] * (xv[k] - c[i * n + k]);
    }
  BOOST_TEST(allclose(g.grads[0].second, per, 1e-12, 1e-13));
  double G2 = 0, tr = 0;
  for (std::size_t r = 0; r < n; ++r) {
    double Gr = 0;
    for (std::size_t k = 0; k < n; ++k) Gr += q.A[r * n + k] * (xv[k] - cbar[k]);
    G2 += Gr * Gr;
    for (std::size_t i = 0; i < B; ++i) {
      double dev = 0;
      for (std::size_t k = 0; k < n; ++k) dev += q.A[r * n + k] * (cbar[k] - c[i * n + k]);
      tr += dev * dev / double(B - 1);
    }
  }
  const NoiseScale s = gradient_noise_scale(g.grads);
  BOOST_TEST(s.batch == B);
  BOOST_TEST(std::abs(s.trace_sigma - tr) <= 1e-12 * tr);
  BOOST_TEST(std::abs(s.mean_grad_sq_norm - G2) <= 1e-12 * G2);
  BOOST_TEST(std::abs(s.grad_sq_norm - (G2 - tr / double(B))) <= 1e-10 * G2);
  if (s.grad_sq_norm > 0) BOOST_TEST(std::abs(s.b_simple - tr / (G2 - tr / double(B))) <= 1e-10 * s.b_simple);
  // Identical examples: no noise.
  const NoiseScale zero = gradient_noise_scale({{"g", ones({4, 3}, DType::Float64)}});
  BOOST_TEST(zero.trace_sigma == 0.0);
  BOOST_TEST(zero.b_simple == 0.0);
  BOOST_TEST(zero.grad_sq_norm == 3.0);
  // Pure noise (mean zero): B_simple is infinite.
  BOOST_TEST(std::isinf(gradient_noise_scale({{"g", tensor({1, -1}, {2, 1}, DType::Float64)}}).b_simple));
}

BOOST_AUTO_TEST_CASE(bad_inputs) {
  const TensorFn f = [](const Tensors& in) { return sum(mul(in[0], in[0])); };
  const HessianOperator H(f, {zeros({4}, DType::Float64)});
  auto lanczos_with = [&](std::size_t k, std::size_t m, double tol) {
    LanczosOptions o;
    o.k = k, o.max_iterations = m, o.tol = tol;
    return lanczos(H, H.inputs(), o);
  };
  BOOST_CHECK_THROW(lanczos_with(0, 5, 1e-6), ValueError);
  BOOST_CHECK_THROW(lanczos_with(3, 2, 1e-6), ValueError);
  BOOST_CHECK_THROW(lanczos_with(5, 10, 1e-6), ValueError);  // k > size 4
  BOOST_CHECK_THROW(lanczos_with(1, 5, 0.0), ValueError);
  BOOST_CHECK_THROW(lanczos_with(1, 5, std::nan("")), ValueError);
  BOOST_CHECK_THROW(lanczos(H, {}, {}), ValueError);
  for (const char* who : {"lanczos", "hutchinson_trace"}) {
    try {  // an empty std::function threw std::bad_function_call before
      if (std::string(who) == "lanczos") lanczos(nullptr, H.inputs(), {});
      else hutchinson_trace(nullptr, H.inputs(), {});
      BOOST_ERROR("no error for an empty operator");
    } catch (const ValueError& e) {
      BOOST_TEST(std::string(e.what()) == std::string(who) + ": no function given");
    }
  }
  const LinearOperator nan_op = [](const Tensors& v) { return Tensors{mul_scalar(v[0], std::nan(""))}; };
  try {
    lanczos(nan_op, {zeros({3}, DType::Float64)}, {});
    BOOST_ERROR("no error for a NaN operator");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) == "lanczos: the operator returned NaN or inf at product 1");
  }
  const LinearOperator wrong_shape = [](const Tensors&) { return Tensors{zeros({2}, DType::Float64)}; };
  BOOST_CHECK_THROW(hutchinson_trace(wrong_shape, {zeros({3}, DType::Float64)}, {}), ShapeError);
  HutchinsonOptions none;
  none.samples = 0;
  BOOST_CHECK_THROW(hutchinson_trace(H, H.inputs(), none), ValueError);
  BOOST_CHECK_THROW(HessianOperator([](const Tensors& in) { return exp(in[0]); }, {zeros({2}, DType::Float64)}), ValueError);
  BOOST_CHECK_THROW(gradient_noise_scale({{"g", ones({1, 3}, DType::Float64)}}), ValueError);
  BOOST_CHECK_THROW(gradient_noise_scale({{"a", ones({3, 2})}, {"b", ones({4})}}), ShapeError);
  BOOST_CHECK_THROW(gradient_noise_scale({}), ValueError);
  // The Krylov basis is bounded before the first product.
  const std::size_t limit = max_tensor_bytes();
  set_max_tensor_bytes(1000);
  BOOST_CHECK_NO_THROW(lanczos_with(1, 4, 1e-6));  // 128 bytes of basis
  set_max_tensor_bytes(100);
  try {
    lanczos_with(1, 4, 1e-6);
    BOOST_ERROR("no MemoryError");
  } catch (const MemoryError& e) {
    BOOST_TEST(std::string(e.what()).find("lanczos: the Krylov basis (1 block: (4, 4) float64) needs 128 bytes, more than the limit of 100") == 0);
  }
  set_max_tensor_bytes(limit);
}

BOOST_AUTO_TEST_SUITE_END()
