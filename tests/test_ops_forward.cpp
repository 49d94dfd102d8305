// Forward values of every public op against independently derived numbers (hand-computed
// small cases, or plain loops over std:: math -- never other xgrad ops), in float64 and
// float32, with broadcasting; plus a few hand-derived gradients.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::allclose;
using test::f32;
using test::f64;
using test::round32;
using test::vals;

namespace {

using Vec = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kE = 2.71828182845904523536;
constexpr double kPi = 3.14159265358979323846;
constexpr double kRtol32 = 2e-6, kAtol32 = 1e-6;  // float32 tolerances

Tensor leaf64(const Vec& v, const Shape& s) { return test::leaf(v, s); }
Tensor leaf32(const Vec& v, const Shape& s) {
  Tensor t = f32(v, s);
  t.set_requires_grad(true);
  return t;
}
std::string sh(const Tensor& t) { return shape_str(t.shape()); }

Vec map(const Vec& v, const std::function<double(double)>& f) {
  Vec r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = f(v[i]);
  return r;
}

std::size_t count(const Shape& s) {
  std::size_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
// Calls f(multi-index) for every index of `s` in row-major order.
void for_each_index(const Shape& s, const std::function<void(const std::vector<std::size_t>&)>& f) {
  const std::size_t n = count(s);
  std::vector<std::size_t> idx(s.size(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    f(idx);
    for (std::size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}
// Element of `a` (shape s) at index `idx` of a (right-aligned) broadcast shape.
double at_bcast(const Vec& a, const Shape& s, const std::vector<std::size_t>& idx) {
  std::size_t off = 0;
  const std::size_t lead = idx.size() - s.size();
  for (std::size_t d = 0; d < s.size(); ++d) off = off * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
  return a[off];
}
// Reference numpy-broadcast binary op.
Vec bcast(const Vec& a, const Shape& as, const Vec& b, const Shape& bs, const Shape& out,
          const std::function<double(double, double)>& f) {
  Vec r;
  for_each_index(out, [&](const auto& idx) { r.push_back(f(at_bcast(a, as, idx), at_bcast(b, bs, idx))); });
  return r;
}

// Reference C = op(A) op(B): A stored (n,k) or (k,n) if ta; B stored (k,m) or (m,k) if tb.
Vec mm(const double* A, const double* B, std::size_t n, std::size_t k, std::size_t m, bool ta,
       bool tb) {
  Vec C(n * m, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double s = 0;
      for (std::size_t q = 0; q < k; ++q)
        s += (ta ? A[q * n + i] : A[i * k + q]) * (tb ? B[j * k + q] : B[q * m + j]);
      C[i * m + j] = s;
    }
  return C;
}
Vec mm(const Vec& A, const Vec& B, std::size_t n, std::size_t k, std::size_t m, bool ta = false,
       bool tb = false) {
  return mm(A.data(), B.data(), n, k, m, ta, tb);
}
// Row-major transpose of an (r, c) matrix.
Vec tr(const Vec& A, std::size_t r, std::size_t c) {
  Vec T(r * c);
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) T[j * r + i] = A[i * c + j];
  return T;
}

// Reference softmax over the last axis of (rows, n), honouring an optional mask (true =
// excluded) and -inf entries; fully excluded rows are all zero.
Vec ref_softmax(const Vec& x, std::size_t rows, std::size_t n, const std::vector<bool>& masked = {}) {
  Vec y(x.size(), 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    double m = -kInf;
    auto ok = [&](std::size_t i) { return (masked.empty() || !masked[r * n + i]) && x[r * n + i] != -kInf; };
    for (std::size_t i = 0; i < n; ++i)
      if (ok(i)) m = std::max(m, x[r * n + i]);
    if (m == -kInf) continue;
    double s = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (ok(i)) s += std::exp(x[r * n + i] - m);
    for (std::size_t i = 0; i < n; ++i)
      if (ok(i)) y[r * n + i] = std::exp(x[r * n + i] - m) / s;
  }
  return y;
}

double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_forward)

// ---------------------------------------------------------------------------------------
// Binary elementwise ops
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(add_sub_mul_div_same_shape_hand_values) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f64({0.5, -1, 2, 4, 0.25, -3}, {2, 3});
  Tensor y = add(a, b);
  BOOST_TEST(sh(y) == "(2, 3)");
  BOOST_TEST(y.dtype() == DType::Float64);
  BOOST_TEST(allclose(y, {1.5, 1, 5, 8, 5.25, 3}));
  BOOST_TEST(allclose(sub(a, b), {0.5, 3, 1, 0, 4.75, 9}));
  BOOST_TEST(allclose(mul(a, b), {0.5, -2, 6, 16, 1.25, -18}));
  BOOST_TEST(allclose(div(a, b), {2, -2, 1.5, 1, 20, -2}));
}

BOOST_AUTO_TEST_CASE(binary_ops_broadcast_against_loops) {
  struct Case { Shape as, bs, out; };
  const std::vector<Case> cases = {{{2, 1, 3}, {4, 3}, {2, 4, 3}},
                                   {{3, 1}, {1, 4}, {3, 4}},
                                   {{}, {2, 3}, {2, 3}},
                                   {{2, 3}, {}, {2, 3}},
                                   {{4}, {2, 1, 1}, {2, 1, 4}},
                                   {{1, 1}, {1}, {1, 1}}};
  unsigned seed = 1;
  for (const auto& c : cases) {
    Vec av = vals(count(c.as), seed++), bv = vals(count(c.bs), seed++, 0.5, 2.0);
    BOOST_TEST_CONTEXT(shape_str(c.as) << " op " << shape_str(c.bs)) {
      Tensor a = f64(av, c.as), b = f64(bv, c.bs);
      Tensor y = add(a, b);
      BOOST_TEST(sh(y) == shape_str(c.out));
      BOOST_TEST(allclose(y, bcast(av, c.as, bv, c.bs, c.out, [](double x, double z) { return x + z; })));
      BOOST_TEST(allclose(sub(a, b), bcast(av, c.as, bv, c.bs, c.out, [](double x, double z) { return x - z; })));
      BOOST_TEST(allclose(mul(a, b), bcast(av, c.as, bv, c.bs, c.out, [](double x, double z) { return x * z; })));
      BOOST_TEST(allclose(div(a, b), bcast(av, c.as, bv, c.bs, c.out, [](double x, double z) { return x / z; }), 1e-12));
      // The operands swapped: broadcasting is symmetric.
      BOOST_TEST(allclose(sub(b, a), bcast(bv, c.bs, av, c.as, c.out, [](double x, double z) { return x - z; })));
    }
  }
}

BOOST_AUTO_TEST_CASE(binary_ops_float32) {
  Vec av = round32(vals(6, 11)), bv = round32(vals(3, 12, 0.5, 2.0));
  Tensor a = f32(av, {2, 3}), b = f32(bv, {3});
  Tensor y = mul(a, b);
  BOOST_TEST(y.dtype() == DType::Float32);
  BOOST_TEST(sh(y) == "(2, 3)");
  BOOST_TEST(allclose(y, bcast(av, {2, 3}, bv, {3}, {2, 3}, [](double x, double z) { return x * z; }), kRtol32, kAtol32));
  BOOST_TEST(allclose(add(a, b), bcast(av, {2, 3}, bv, {3}, {2, 3}, [](double x, double z) { return x + z; }), kRtol32, kAtol32));
  BOOST_TEST(allclose(sub(a, b), bcast(av, {2, 3}, bv, {3}, {2, 3}, [](double x, double z) { return x - z; }), kRtol32, kAtol32));
  BOOST_TEST(allclose(div(a, b), bcast(av, {2, 3}, bv, {3}, {2, 3}, [](double x, double z) { return x / z; }), kRtol32, kAtol32));
  // Exactly representable: exact results.
  BOOST_TEST(allclose(add(f32({0.5, 1.25}, {2}), f32({0.25, -1}, {2})), {0.75, 0.25}, 0, 0));
}

BOOST_AUTO_TEST_CASE(empty_broadcast) {
  Tensor y = add(f64({}, {0, 3}), f64({1, 2, 3}, {3}));
  BOOST_TEST(sh(y) == "(0, 3)");
  BOOST_TEST(y.numel() == 0u);
}

// ---------------------------------------------------------------------------------------
// Scalar ops, pow, operators
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(neg_add_scalar_mul_scalar) {
  Tensor x = f64({1, -2, 0.5, 0}, {2, 2});
  BOOST_TEST(allclose(neg(x), {-1, 2, -0.5, 0}));
  BOOST_TEST(sh(neg(x)) == "(2, 2)");
  BOOST_TEST(allclose(add_scalar(x, 1.5), {2.5, -0.5, 2, 1.5}));
  BOOST_TEST(allclose(mul_scalar(x, -3), {-3, 6, -1.5, 0}));
  Tensor x32 = f32({1, -2, 0.5, 0}, {4});
  BOOST_TEST(add_scalar(x32, 0.25).dtype() == DType::Float32);
  BOOST_TEST(allclose(add_scalar(x32, 0.25), {1.25, -1.75, 0.75, 0.25}, 0, 0));
  BOOST_TEST(allclose(mul_scalar(x32, 0.5), {0.5, -1, 0.25, 0}, 0, 0));
  BOOST_TEST(allclose(neg(x32), {-1, 2, -0.5, 0}, 0, 0));
  // rank 0
  Tensor s = scalar(2.0, DType::Float64);
  BOOST_TEST(sh(mul_scalar(s, 4)) == "()");
  BOOST_TEST(mul_scalar(s, 4).item() == 8.0);
}

BOOST_AUTO_TEST_CASE(pow_values) {
  Vec xv = {0.5, 1, 2, 4, 9, 1.5};
  Tensor x = f64(xv, {2, 3});
  BOOST_TEST(allclose(pow(x, 2.0), {0.25, 1, 4, 16, 81, 2.25}));
  BOOST_TEST(allclose(pow(x, 0.5), map(xv, [](double v) { return std::sqrt(v); })));
  BOOST_TEST(allclose(pow(x, -1.0), {2, 1, 0.5, 0.25, 1.0 / 9, 1.0 / 1.5}));
  BOOST_TEST(allclose(pow(x, 2.5), map(xv, [](double v) { return std::pow(v, 2.5); }), 1e-12));
  BOOST_TEST(allclose(pow(x, 0.0), {1, 1, 1, 1, 1, 1}));
  BOOST_TEST(allclose(pow(f64({-2, -1, 3}, {3}), 3.0), {-8, -1, 27}));
  BOOST_TEST(allclose(pow(f32({-2, 0.5, 3}, {3}), 2.0), {4, 0.25, 9}, kRtol32, 0));
  BOOST_TEST(pow(f32({2}, {1}), 2.0).dtype() == DType::Float32);
}

BOOST_AUTO_TEST_CASE(operators) {
  Tensor a = f64({1, 2, 4}, {3}), b = f64({2, -1, 0.5}, {3});
  BOOST_TEST(allclose(a + b, {3, 1, 4.5}));
  BOOST_TEST(allclose(a - b, {-1, 3, 3.5}));
  BOOST_TEST(allclose(a * b, {2, -2, 2}));
  BOOST_TEST(allclose(a / b, {0.5, -2, 8}));
  BOOST_TEST(allclose(-a, {-1, -2, -4}));
  BOOST_TEST(allclose(a + 1.0, {2, 3, 5}));
  BOOST_TEST(allclose(1.0 + a, {2, 3, 5}));
  BOOST_TEST(allclose(a - 1.0, {0, 1, 3}));
  BOOST_TEST(allclose(1.0 - a, {0, -1, -3}));
  BOOST_TEST(allclose(a * 3.0, {3, 6, 12}));
  BOOST_TEST(allclose(3.0 * a, {3, 6, 12}));
  BOOST_TEST(allclose(a / 4.0, {0.25, 0.5, 1}));
  BOOST_TEST(allclose(2.0 / a, {2, 1, 0.5}));
  // Broadcasting through operators, and composition.
  Tensor m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  BOOST_TEST(allclose(m * a - b / 2.0, {1 - 1, 4 + 0.5, 12 - 0.25, 4 - 1, 10 + 0.5, 24 - 0.25}));
}

// ---------------------------------------------------------------------------------------
// Unary functions
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(unary_functions_float64) {
  Vec xv = {-3, -1.5, -0.5, 0, 0.25, 1, 2.5, 4};
  Vec pv = {0.01, 0.25, 0.5, 1, 2, 4, 9, 100};
  Tensor x = f64(xv, {2, 4}), p = f64(pv, {2, 4});
  BOOST_TEST(allclose(exp(x), map(xv, [](double v) { return std::exp(v); }), 1e-14));
  BOOST_TEST(allclose(log(p), map(pv, [](double v) { return std::log(v); }), 1e-14, 1e-15));
  BOOST_TEST(allclose(sqrt(p), map(pv, [](double v) { return std::sqrt(v); }), 1e-14));
  BOOST_TEST(allclose(rsqrt(p), map(pv, [](double v) { return 1.0 / std::sqrt(v); }), 1e-14));
  BOOST_TEST(allclose(tanh(x), map(xv, [](double v) { return std::tanh(v); }), 1e-14, 1e-16));
  BOOST_TEST(allclose(sigmoid(x), map(xv, ref_sigmoid), 1e-14));
  BOOST_TEST(allclose(relu(x), {0, 0, 0, 0, 0.25, 1, 2.5, 4}, 0, 0));
  BOOST_TEST(allclose(erf(x), map(xv, [](double v) { return std::erf(v); }), 1e-14, 1e-16));
  BOOST_TEST(allclose(gelu(x), map(xv, ref_gelu), 1e-13, 1e-16));
  for (auto* y : {&x, &p}) BOOST_TEST(sh(exp(*y)) == "(2, 4)");
  // Hand values.
  BOOST_TEST(allclose(exp(f64({0, 1}, {2})), {1, kE}));
  BOOST_TEST(allclose(log(f64({1, kE}, {2})), {0, 1}));
  BOOST_TEST(allclose(sqrt(f64({4, 0}, {2})), {2, 0}));
  BOOST_TEST(allclose(rsqrt(f64({4, 0.25}, {2})), {0.5, 2}));
  BOOST_TEST(allclose(sigmoid(f64({0}, {1})), {0.5}));
  BOOST_TEST(allclose(gelu(f64({0, 1}, {2})), {0, 0.8413447460685429}, 1e-12));
  BOOST_TEST(allclose(erf(f64({0.5}, {1})), {0.5204998778130465}, 1e-12));
}

BOOST_AUTO_TEST_CASE(unary_functions_extremes) {
  // Saturating inputs: no NaN, correct limits.
  Tensor x = f64({-800, -50, 50, 800}, {4});
  BOOST_TEST(allclose(sigmoid(x), {0, ref_sigmoid(-50), 1, 1}, 1e-12, 1e-300));
  BOOST_TEST(allclose(tanh(x), {-1, -1, 1, 1}));
  BOOST_TEST(allclose(erf(x), {-1, -1, 1, 1}));
  BOOST_TEST(allclose(gelu(x), {0, 0, 50, 800}, 1e-12, 1e-12));
  BOOST_TEST(allclose(relu(x), {0, 0, 50, 800}));
  Tensor x32 = f32({-100, 100}, {2});
  BOOST_TEST(allclose(sigmoid(x32), {0, 1}, 0, 1e-30));
  BOOST_TEST(test::all_finite(sigmoid(x32)));
}

BOOST_AUTO_TEST_CASE(unary_functions_float32) {
  Vec xv = round32({-3, -1.5, -0.3, 0, 0.2, 1, 2.5, 4});
  Vec pv = round32({0.01, 0.25, 0.5, 1, 2, 4, 9, 100});
  Tensor x = f32(xv, {8}), p = f32(pv, {8});
  auto check = [](const Tensor& y, const Vec& expected) {
    BOOST_TEST(y.dtype() == DType::Float32);
    BOOST_TEST(allclose(y, expected, kRtol32, kAtol32));
  };
  check(exp(x), map(xv, [](double v) { return std::exp(v); }));
  check(log(p), map(pv, [](double v) { return std::log(v); }));
  check(sqrt(p), map(pv, [](double v) { return std::sqrt(v); }));
  check(rsqrt(p), map(pv, [](double v) { return 1.0 / std::sqrt(v); }));
  check(tanh(x), map(xv, [](double v) { return std::tanh(v); }));
  check(sigmoid(x), map(xv, ref_sigmoid));
  check(relu(x), map(xv, [](double v) { return v > 0 ? v : 0.0; }));
  check(erf(x), map(xv, [](double v) { return std::erf(v); }));
  check(gelu(x), map(xv, ref_gelu));
}

BOOST_AUTO_TEST_CASE(unary_rank0_and_empty) {
  Tensor s = scalar(0.5, DType::Float64);
  BOOST_TEST(sh(exp(s)) == "()");
  BOOST_TEST(exp(s).item() == std::exp(0.5), boost::test_tools::tolerance(1e-15));
  Tensor e = f64({}, {0, 3});
  BOOST_TEST(sh(gelu(e)) == "(0, 3)");
  BOOST_TEST(sh(log(e)) == "(0, 3)");
}

// ---------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(sum_all_and_axes) {
  // x[i][j][k] = 100 i + 10 j + k, shape (2, 3, 4)
  Vec xv;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) xv.push_back(100 * i + 10 * j + k);
  Tensor x = f64(xv, {2, 3, 4});
  Tensor all = sum(x);
  BOOST_TEST(sh(all) == "()");
  // sum = 12*100 + (0+10+20)*8 + (0+1+2+3)*6 = 1200 + 240 + 36
  BOOST_TEST(all.item() == 1476.0);

  Tensor s2 = sum(x, {2});  // sum over k: 4*(100 i + 10 j) + 6
  BOOST_TEST(sh(s2) == "(2, 3)");
  BOOST_TEST(allclose(s2, {6, 46, 86, 406, 446, 486}));
  Tensor s2k = sum(x, {-1}, true);
  BOOST_TEST(sh(s2k) == "(2, 3, 1)");
  BOOST_TEST(allclose(s2k, {6, 46, 86, 406, 446, 486}));
  Tensor s0 = sum(x, {0});  // 100 + 2*(10 j + k)
  BOOST_TEST(sh(s0) == "(3, 4)");
  Vec e0;
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k) e0.push_back(100 + 2 * (10 * j + k));
  BOOST_TEST(allclose(s0, e0));
  Tensor s02 = sum(x, {0, 2});  // over i and k: 4*100 + 8*10 j + 2*6
  BOOST_TEST(sh(s02) == "(3)");
  BOOST_TEST(allclose(s02, {412, 492, 572}));
  Tensor s02k = sum(x, {2, -3}, true);
  BOOST_TEST(sh(s02k) == "(1, 3, 1)");
  BOOST_TEST(allclose(s02k, {412, 492, 572}));
  Tensor s1 = sum(x, {1});  // 3*(100 i + k) + 30
  BOOST_TEST(sh(s1) == "(2, 4)");
  BOOST_TEST(allclose(s1, {30, 33, 36, 39, 330, 333, 336, 339}));
  // An empty axes list reduces every axis.
  Tensor e = sum(x, {});
  BOOST_TEST(sh(e) == "()");
  BOOST_TEST(allclose(e, {1476}));
  Tensor ek = sum(x, {}, true);
  BOOST_TEST(sh(ek) == "(1, 1, 1)");
  BOOST_TEST(allclose(ek, {1476}));
}

BOOST_AUTO_TEST_CASE(sum_float32_and_edge_shapes) {
  Vec xv = round32(vals(12, 21));
  Tensor x = f32(xv, {3, 4});
  Tensor y = sum(x, {1});
  BOOST_TEST(y.dtype() == DType::Float32);
  Vec e(3, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) e[i] += xv[i * 4 + j];
  BOOST_TEST(allclose(y, e, 1e-5, 1e-5));
  // Empty along the reduced axis: zeros.
  Tensor z = sum(f64({}, {0, 3}), {0});
  BOOST_TEST(sh(z) == "(3)");
  BOOST_TEST(allclose(z, {0, 0, 0}));
  // Size-1 axes and rank 1.
  BOOST_TEST(allclose(sum(f64({1, 2, 3}, {3, 1}), {1}), {1, 2, 3}));
  BOOST_TEST(sh(sum(f64({1, 2, 3}, {3}), {0})) == "()");
  BOOST_TEST(allclose(sum(f64({1, 2, 3}, {3}), {0}), {6}));
}

// A row summed into one element goes into 16 float64 lanes (element i into lane i mod 16, then
// the lanes pairwise in halves; ops/reduce.cpp, detail::lane_sum), rounded to float32 once:
// that order exactly, on every CPU path and thread count, and within a float32 rounding of the
// float64 sum (2^-24 relative, plus n * 2^-53 * sum|x| for the float64 adds).
BOOST_AUTO_TEST_CASE(float32_row_sums_in_sixteen_float64_lanes_exactly) {
  for (std::size_t n : {1, 15, 16, 17, 100, 4099}) {
    BOOST_TEST_CONTEXT("row length " << n) {
      const Vec xv = round32(vals(3 * n, unsigned(n), -3.0, 5.0));
      std::vector<float> expect(3);
      std::vector<double> exact(3, 0.0), abs_sum(3, 0.0);
      for (std::size_t r = 0; r < 3; ++r) {
        double lane[16] = {};
        for (std::size_t i = 0; i < n; ++i) {
          lane[i % 16] += xv[r * n + i];
          exact[r] += xv[r * n + i];
          abs_sum[r] += std::abs(xv[r * n + i]);
        }
        expect[r] = float(test::add_lanes_in_halves(lane));
      }
      const float all_expect = [&] {  // the whole tensor: one row of 3 n elements
        double lane[16] = {};
        for (std::size_t i = 0; i < 3 * n; ++i) lane[i % 16] += xv[i];
        return float(test::add_lanes_in_halves(lane));
      }();
      const CpuPath before = cpu_path();
      for (CpuPath path : supported_cpu_paths())
        for (int threads : {1, 2})
          test::with_threads(threads, [&] {
            set_cpu_path(path);
            const Tensor rows = sum(f32(xv, {3, n}), {1});
            const Tensor all = sum(f32(xv, {3, n}));
            for (std::size_t r = 0; r < 3; ++r) {
              BOOST_TEST(rows.data<float>()[r] == expect[r]);
              BOOST_TEST(std::abs(double(rows.data<float>()[r]) - exact[r]) <=
                         6e-8 * std::abs(exact[r]) + double(n) * 1.2e-16 * abs_sum[r]);
            }
            // (3, 1) in all is a column sum (rows in order, reduce_sum's column path), not one row
            if (n > 1) BOOST_TEST(all.data<float>()[0] == all_expect);
          });
      set_cpu_path(before);
    }
  }
}

BOOST_AUTO_TEST_CASE(mean_values) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  BOOST_TEST(sh(mean(x)) == "()");
  BOOST_TEST(allclose(mean(x), {3.5}));
  BOOST_TEST(allclose(mean(x, {0}), {2.5, 3.5, 4.5}));
  BOOST_TEST(allclose(mean(x, {1}), {2, 5}));
  BOOST_TEST(sh(mean(x, {-1}, true)) == "(2, 1)");
  BOOST_TEST(allclose(mean(x, {-1}, true), {2, 5}));
  BOOST_TEST(allclose(mean(x, {0, 1}), {3.5}));
  BOOST_TEST(sh(mean(x, {}, true)) == "(1, 1)");
  Tensor x32 = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  BOOST_TEST(mean(x32, {0}).dtype() == DType::Float32);
  BOOST_TEST(allclose(mean(x32, {0}), {2.5, 3.5, 4.5}, kRtol32));
  // (2, 3, 4) over axes 0 and 2: mean of 8 values each
  Vec xv = vals(24, 31);
  Vec e(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) e[j] += xv[(i * 3 + j) * 4 + k] / 8.0;
  BOOST_TEST(allclose(mean(f64(xv, {2, 3, 4}), {0, 2}), e, 1e-12, 1e-14));
}

BOOST_AUTO_TEST_CASE(max_values) {
  Tensor x = f64({1, 5, -2, 7, 0, 3, -4, -1, -9, 2, 2, 8}, {3, 4});
  Tensor m1 = xgrad::max(x, 1);
  BOOST_TEST(sh(m1) == "(3)");
  BOOST_TEST(allclose(m1, {7, 3, 8}));
  Tensor m1k = xgrad::max(x, -1, true);
  BOOST_TEST(sh(m1k) == "(3, 1)");
  BOOST_TEST(allclose(m1k, {7, 3, 8}));
  Tensor m0 = xgrad::max(x, 0);
  BOOST_TEST(sh(m0) == "(4)");
  BOOST_TEST(allclose(m0, {1, 5, 2, 8}));
  BOOST_TEST(sh(xgrad::max(x, -2, true)) == "(1, 4)");
  // All-negative rows (max is not clamped at 0), rank 1 -> rank 0.
  Tensor r = xgrad::max(f64({-3, -1, -2}, {3}), 0);
  BOOST_TEST(sh(r) == "()");
  BOOST_TEST(r.item() == -1.0);
  // Middle axis of a rank-3 tensor against loops; float32.
  Vec xv = round32(vals(24, 41));
  Tensor y = xgrad::max(f32(xv, {2, 3, 4}), 1);
  Vec e;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double m = -kInf;
      for (int j = 0; j < 3; ++j) m = std::max(m, xv[(i * 3 + j) * 4 + k]);
      e.push_back(m);
    }
  BOOST_TEST(y.dtype() == DType::Float32);
  BOOST_TEST(sh(y) == "(2, 4)");
  BOOST_TEST(allclose(y, e, 0, 0));
  // -inf entries.
  BOOST_TEST(allclose(xgrad::max(f64({-kInf, -5}, {2}), 0), {-5}));
}

BOOST_AUTO_TEST_CASE(amax_values) {
  Vec xv = vals(24, 51);
  Tensor x = f64(xv, {2, 3, 4});
  Tensor y = amax(x, {0, 2});
  BOOST_TEST(sh(y) == "(3)");
  Vec e(3, -kInf);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) e[j] = std::max(e[j], xv[(i * 3 + j) * 4 + k]);
  BOOST_TEST(allclose(y, e, 0, 0));
  Tensor yk = amax(x, {0, -1}, true);
  BOOST_TEST(sh(yk) == "(1, 3, 1)");
  BOOST_TEST(allclose(yk, e, 0, 0));
  double all = -kInf;
  for (double v : xv) all = std::max(all, v);
  BOOST_TEST(sh(amax(x, {})) == "()");
  BOOST_TEST(allclose(amax(x, {}), {all}, 0, 0));
  BOOST_TEST(sh(amax(x, {}, true)) == "(1, 1, 1)");
  BOOST_TEST(allclose(amax(x, {1}), xgrad::max(x, 1)));
}

BOOST_AUTO_TEST_CASE(sum_to_and_broadcast_to) {
  Vec xv = vals(24, 61);
  Tensor x = f64(xv, {2, 3, 4});
  // sum_to (3, 1): sum over i and k
  Tensor s = sum_to(x, {3, 1});
  BOOST_TEST(sh(s) == "(3, 1)");
  Vec e(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) e[j] += xv[(i * 3 + j) * 4 + k];
  BOOST_TEST(allclose(s, e, 1e-12, 1e-14));
  // sum_to (4): over i and j; sum_to (2, 1, 4): over j
  Tensor s4 = sum_to(x, {4});
  Vec e4(4, 0.0), e214(8, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        e4[k] += xv[(i * 3 + j) * 4 + k];
        e214[i * 4 + k] += xv[(i * 3 + j) * 4 + k];
      }
  BOOST_TEST(sh(s4) == "(4)");
  BOOST_TEST(allclose(s4, e4, 1e-12, 1e-14));
  BOOST_TEST(sh(sum_to(x, {2, 1, 4})) == "(2, 1, 4)");
  BOOST_TEST(allclose(sum_to(x, {2, 1, 4}), e214, 1e-12, 1e-14));
  Tensor s0 = sum_to(x, {});
  BOOST_TEST(sh(s0) == "()");
  double tot = 0;
  for (double v : xv) tot += v;
  BOOST_TEST(allclose(s0, {tot}, 1e-12, 1e-13));
  BOOST_TEST(allclose(sum_to(x, {2, 3, 4}), xv, 0, 0));

  // broadcast_to
  Tensor b = broadcast_to(f64({1, 2, 3}, {3, 1}), {2, 3, 4});
  BOOST_TEST(sh(b) == "(2, 3, 4)");
  Vec eb;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) eb.push_back(j + 1);
  BOOST_TEST(allclose(b, eb, 0, 0));
  Tensor b4 = broadcast_to(f32({1, 2, 3, 4}, {4}), {2, 4});
  BOOST_TEST(b4.dtype() == DType::Float32);
  BOOST_TEST(allclose(b4, {1, 2, 3, 4, 1, 2, 3, 4}, 0, 0));
  Tensor bs = broadcast_to(scalar(7, DType::Float64), {2, 2});
  BOOST_TEST(allclose(bs, {7, 7, 7, 7}, 0, 0));
  Tensor bm = broadcast_to(f64({1, 2}, {2, 1}), {2, 3});
  BOOST_TEST(allclose(bm, {1, 1, 1, 2, 2, 2}, 0, 0));
}

// ---------------------------------------------------------------------------------------
// Shape ops
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(reshape_flatten_squeeze) {
  Vec xv = {0, 1, 2, 3, 4, 5};
  Tensor x = f64(xv, {2, 3});
  Tensor r = reshape(x, {3, 2});
  BOOST_TEST(sh(r) == "(3, 2)");
  BOOST_TEST(allclose(r, xv, 0, 0));
  BOOST_TEST(sh(reshape(x, {6})) == "(6)");
  BOOST_TEST(sh(reshape(x, {1, 2, 1, 3})) == "(1, 2, 1, 3)");
  BOOST_TEST(sh(reshape(f64({4}, {1}), {})) == "()");
  Tensor fl = flatten(f32(xv, {1, 2, 3}));
  BOOST_TEST(sh(fl) == "(6)");
  BOOST_TEST(fl.dtype() == DType::Float32);
  BOOST_TEST(allclose(fl, xv, 0, 0));
  Tensor q = squeeze(f64(xv, {2, 1, 3}), 1);
  BOOST_TEST(sh(q) == "(2, 3)");
  BOOST_TEST(allclose(q, xv, 0, 0));
  BOOST_TEST(sh(squeeze(f64(xv, {2, 3, 1}), -1)) == "(2, 3)");
  BOOST_TEST(sh(squeeze(f64(xv, {1, 6}), 0)) == "(6)");
}

BOOST_AUTO_TEST_CASE(unsqueeze_positive_axes) {
  Vec xv = {0, 1, 2, 3, 4, 5};
  Tensor x = f64(xv, {2, 3});
  BOOST_TEST(sh(unsqueeze(x, 0)) == "(1, 2, 3)");
  BOOST_TEST(sh(unsqueeze(x, 1)) == "(2, 1, 3)");
  BOOST_TEST(sh(unsqueeze(x, 2)) == "(2, 3, 1)");
  BOOST_TEST(allclose(unsqueeze(x, 1), xv, 0, 0));
}

BOOST_AUTO_TEST_CASE(unsqueeze_negative_axes) {
  // As torch.unsqueeze: a negative axis counts in the output's rank (axis + rank + 1).
  Tensor x = f64({0, 1, 2, 3, 4, 5}, {2, 3});
  BOOST_TEST(sh(unsqueeze(x, -1)) == "(2, 3, 1)");
  BOOST_TEST(sh(unsqueeze(x, -2)) == "(2, 1, 3)");
  BOOST_TEST(sh(unsqueeze(x, -3)) == "(1, 2, 3)");
  BOOST_TEST(sh(unsqueeze(f64({1, 2}, {2}), -1)) == "(2, 1)");
}

BOOST_AUTO_TEST_CASE(permute_and_transpose) {
  Vec xv = vals(24, 71);
  Tensor x = f64(xv, {2, 3, 4});
  auto X = [&](std::size_t i, std::size_t j, std::size_t k) { return xv[(i * 3 + j) * 4 + k]; };
  // permute (2, 0, 1): y[k][i][j] = x[i][j][k]
  Tensor p = permute(x, {2, 0, 1});
  BOOST_TEST(sh(p) == "(4, 2, 3)");
  Vec ep;
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j) ep.push_back(X(i, j, k));
  BOOST_TEST(allclose(p, ep, 0, 0));
  // permute (1, 2, 0): y[j][k][i]
  Tensor p2 = permute(x, {1, 2, 0});
  BOOST_TEST(sh(p2) == "(3, 4, 2)");
  Vec ep2;
  for (std::size_t j = 0; j < 3; ++j)
    for (std::size_t k = 0; k < 4; ++k)
      for (std::size_t i = 0; i < 2; ++i) ep2.push_back(X(i, j, k));
  BOOST_TEST(allclose(p2, ep2, 0, 0));
  BOOST_TEST(allclose(permute(x, {0, 1, 2}), xv, 0, 0));
  // transpose(0, 2): y[k][j][i]
  Tensor t = transpose(x, 0, 2);
  BOOST_TEST(sh(t) == "(4, 3, 2)");
  Vec et;
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t i = 0; i < 2; ++i) et.push_back(X(i, j, k));
  BOOST_TEST(allclose(t, et, 0, 0));
  // transpose(-1, -2): y[i][k][j]
  Tensor t2 = transpose(f32(xv, {2, 3, 4}), -1, -2);
  BOOST_TEST(sh(t2) == "(2, 4, 3)");
  BOOST_TEST(t2.dtype() == DType::Float32);
  Vec et2;
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t k = 0; k < 4; ++k)
      for (std::size_t j = 0; j < 3; ++j) et2.push_back(X(i, j, k));
  BOOST_TEST(allclose(t2, round32(et2), 0, 0));
  // 2-D
  BOOST_TEST(allclose(transpose(f64({1, 2, 3, 4, 5, 6}, {2, 3}), 0, 1), {1, 4, 2, 5, 3, 6}, 0, 0));
}

BOOST_AUTO_TEST_CASE(narrow_slice_unnarrow) {
  Vec xv = vals(24, 81);
  Tensor x = f64(xv, {2, 4, 3});
  Tensor n = narrow(x, 1, 1, 2);
  BOOST_TEST(sh(n) == "(2, 2, 3)");
  Vec en;
  for (int i = 0; i < 2; ++i)
    for (int j = 1; j < 3; ++j)
      for (int k = 0; k < 3; ++k) en.push_back(xv[(i * 4 + j) * 3 + k]);
  BOOST_TEST(allclose(n, en, 0, 0));
  BOOST_TEST(allclose(slice(x, 1, 1, 3), en, 0, 0));  // libtorch's slice: end index 3, not length
  BOOST_TEST(allclose(slice(x, 1, -3, -1), en, 0, 0));  // negative: + size
  // last axis, negative
  Tensor nl = narrow(x, -1, 2, 1);
  BOOST_TEST(sh(nl) == "(2, 4, 1)");
  Vec el;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) el.push_back(xv[(i * 4 + j) * 3 + 2]);
  BOOST_TEST(allclose(nl, el, 0, 0));
  // first axis, full range, empty range
  BOOST_TEST(allclose(narrow(x, 0, 1, 1), Vec(xv.begin() + 12, xv.end()), 0, 0));
  BOOST_TEST(allclose(narrow(x, 0, 0, 2), xv, 0, 0));
  BOOST_TEST(sh(narrow(x, 1, 4, 0)) == "(2, 0, 3)");
  // unnarrow: zeros with x placed at start
  Tensor u = unnarrow(f64({1, 2, 3, 4}, {2, 2}), 1, 1, 4);
  BOOST_TEST(sh(u) == "(2, 4)");
  BOOST_TEST(allclose(u, {0, 1, 2, 0, 0, 3, 4, 0}, 0, 0));
  Tensor u0 = unnarrow(f32({1, 2, 3, 4}, {2, 2}), 0, 2, 4);
  BOOST_TEST(u0.dtype() == DType::Float32);
  BOOST_TEST(allclose(u0, {0, 0, 0, 0, 1, 2, 3, 4}, 0, 0));
  // narrow(unnarrow(x)) == x
  BOOST_TEST(allclose(narrow(unnarrow(n, 1, 1, 4), 1, 1, 2), en, 0, 0));
}

BOOST_AUTO_TEST_CASE(concat_split_chunk) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64({7, 8}, {2, 1}), c = f64({9, 10, 11, 12}, {2, 2});
  Tensor y = concat({a, b, c}, -1);
  BOOST_TEST(sh(y) == "(2, 6)");
  BOOST_TEST(allclose(y, {1, 2, 3, 7, 9, 10, 4, 5, 6, 8, 11, 12}, 0, 0));
  Tensor y0 = concat({a, f64({-1, -2, -3}, {1, 3})}, 0);
  BOOST_TEST(sh(y0) == "(3, 3)");
  BOOST_TEST(allclose(y0, {1, 2, 3, 4, 5, 6, -1, -2, -3}, 0, 0));
  BOOST_TEST(allclose(concat({a}, 1), {1, 2, 3, 4, 5, 6}, 0, 0));
  BOOST_TEST(sh(concat({a, f64({}, {2, 0})}, 1)) == "(2, 3)");
  // Middle axis of rank 3, float32.
  Tensor p = f32({1, 2, 3, 4}, {2, 1, 2}), q = f32({5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 2});
  Tensor pq = concat({p, q}, 1);
  BOOST_TEST(pq.dtype() == DType::Float32);
  BOOST_TEST(sh(pq) == "(2, 3, 2)");
  BOOST_TEST(allclose(pq, {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}, 0, 0));

  // split
  auto parts = split(y, {1, 3, 2}, 1);
  BOOST_TEST_REQUIRE(parts.size() == 3u);
  BOOST_TEST(sh(parts[0]) == "(2, 1)");
  BOOST_TEST(sh(parts[1]) == "(2, 3)");
  BOOST_TEST(sh(parts[2]) == "(2, 2)");
  BOOST_TEST(allclose(parts[0], {1, 4}, 0, 0));
  BOOST_TEST(allclose(parts[1], {2, 3, 7, 5, 6, 8}, 0, 0));
  BOOST_TEST(allclose(parts[2], {9, 10, 11, 12}, 0, 0));
  auto rows = split(y0, {2, 1}, 0);
  BOOST_TEST_REQUIRE(rows.size() == 2u);
  BOOST_TEST(allclose(rows[1], {-1, -2, -3}, 0, 0));
  auto withzero = split(a, {0, 3}, -1);
  BOOST_TEST_REQUIRE(withzero.size() == 2u);
  BOOST_TEST(sh(withzero[0]) == "(2, 0)");

  // chunk
  auto ch = chunk(y, 3, -1);
  BOOST_TEST_REQUIRE(ch.size() == 3u);
  BOOST_TEST(allclose(ch[0], {1, 2, 4, 5}, 0, 0));
  BOOST_TEST(allclose(ch[1], {3, 7, 6, 8}, 0, 0));
  BOOST_TEST(allclose(ch[2], {9, 10, 11, 12}, 0, 0));
  auto ch0 = chunk(y, 2, 0);
  BOOST_TEST_REQUIRE(ch0.size() == 2u);
  BOOST_TEST(sh(ch0[0]) == "(1, 6)");
  BOOST_TEST(allclose(ch0[1], {4, 5, 6, 8, 11, 12}, 0, 0));
  // Round trip.
  BOOST_TEST(allclose(concat(ch, 1), y, 0, 0));
}

// ---------------------------------------------------------------------------------------
// matmul and linear
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(matmul_2d_hand_values) {
  // [[1,2],[3,4]] [[5,6],[7,8]] = [[19,22],[43,50]]
  Tensor a = f64({1, 2, 3, 4}, {2, 2}), b = f64({5, 6, 7, 8}, {2, 2});
  Tensor y = matmul(a, b);
  BOOST_TEST(sh(y) == "(2, 2)");
  BOOST_TEST(allclose(y, {19, 22, 43, 50}, 0, 0));
  // (2,3) x (3,1)
  BOOST_TEST(allclose(matmul(f64({1, 2, 3, 4, 5, 6}, {2, 3}), f64({1, 0, -1}, {3, 1})), {-2, -2}, 0, 0));
  // float32
  Tensor y32 = matmul(f32({1, 2, 3, 4}, {2, 2}), f32({5, 6, 7, 8}, {2, 2}));
  BOOST_TEST(y32.dtype() == DType::Float32);
  BOOST_TEST(allclose(y32, {19, 22, 43, 50}, 0, 0));
}

BOOST_AUTO_TEST_CASE(matmul_2d_every_transpose_flag) {
  const std::size_t n = 3, k = 4, m = 2;
  Vec A = vals(n * k, 91), B = vals(k * m, 92);  // logical A (n,k), B (k,m)
  Vec expected = mm(A, B, n, k, m);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      BOOST_TEST_CONTEXT("ta " << ta << " tb " << tb) {
        // Store the transposed operand as it would be passed: A^T is (k,n), B^T is (m,k).
        Tensor a = ta ? f64(tr(A, n, k), {k, n}) : f64(A, {n, k});
        Tensor b = tb ? f64(tr(B, k, m), {m, k}) : f64(B, {k, m});
        Tensor y = matmul(a, b, ta, tb);
        BOOST_TEST(sh(y) == "(3, 2)");
        BOOST_TEST(allclose(y, expected, 1e-12, 1e-13));
        Tensor y32 = matmul(a.to(DType::Float32), b.to(DType::Float32), ta, tb);
        BOOST_TEST(y32.dtype() == DType::Float32);
        BOOST_TEST(test::gemm_f32_within_bound(y32, round32(A), round32(B), n, k, m));
      }
    }
}

// Float32 GEMMs of every kernel shape class (tails, long K, split into blocks) within the
// bound derived from the arithmetic, whatever OpenBLAS kernel or thread count runs them.
BOOST_AUTO_TEST_CASE(matmul_float32_within_the_derived_error_bound) {
  for (const auto& nkm : {std::array<std::size_t, 3>{1, 1, 1}, std::array<std::size_t, 3>{7, 33, 5},
                          std::array<std::size_t, 3>{64, 4096, 48}, std::array<std::size_t, 3>{1100, 128, 256}}) {
    const std::size_t n = nkm[0], k = nkm[1], m = nkm[2];  // not a structured binding: lambdas capture these
    Vec A = round32(vals(n * k, 93)), B = round32(vals(k * m, 94));
    for (int threads : {1, 3})
      test::with_threads(threads, [&] {
        Tensor y = matmul(f32(A, {n, k}), f32(B, {k, m}));
        BOOST_TEST_CONTEXT("(" << n << ", " << k << ") x (" << k << ", " << m << "), threads " << threads) {
          BOOST_TEST(test::gemm_f32_within_bound(y, A, B, n, k, m));
        }
      });
  }
}

// Float32 products with every dimension <= 32 run xgrad's own small GEMM (ops/tiled_gemm.cpp),
// larger ones its tiled GEMM (op(A) not transposed) or OpenBLAS (a transposed A): all within
// the derived bound on every CPU path, for every transpose
// and tile tail (4-row, 16-column tiles). Each element is a function of its row of op(A) and
// column of op(B) alone: a row computed by itself, or a column, has the same bits.
BOOST_AUTO_TEST_CASE(small_float32_gemm_within_the_bound_on_every_cpu_path) {
  const CpuPath before = cpu_path();
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    for (const auto& nkm : {std::array<std::size_t, 3>{1, 1, 1}, std::array<std::size_t, 3>{3, 7, 5},
                            std::array<std::size_t, 3>{4, 16, 16}, std::array<std::size_t, 3>{5, 17, 15},
                            std::array<std::size_t, 3>{16, 16, 16}, std::array<std::size_t, 3>{31, 29, 32},
                            std::array<std::size_t, 3>{32, 32, 32}, std::array<std::size_t, 3>{33, 16, 16},
                            std::array<std::size_t, 3>{16, 33, 16}, std::array<std::size_t, 3>{16, 16, 33}}) {
      const std::size_t n = nkm[0], k = nkm[1], m = nkm[2];
      const Vec A = round32(vals(n * k, 95)), B = round32(vals(k * m, 96));
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          BOOST_TEST_CONTEXT(cpu_path_name(path) << " (" << n << ", " << k << ") x (" << k << ", " << m << "), ta "
                                                 << ta << " tb " << tb) {
            const Tensor a = ta ? f32(tr(A, n, k), {k, n}) : f32(A, {n, k});
            const Tensor b = tb ? f32(tr(B, k, m), {m, k}) : f32(B, {k, m});
            const Tensor y = matmul(a, b, ta, tb);
            BOOST_TEST(test::gemm_f32_within_bound(y, A, B, n, k, m));
            if (ta || tb || n > 32 || k > 32 || m > 32) continue;  // OpenBLAS promises no such independence
            const auto yv = y.to_vector();
            const std::size_t i = n - 1, j = m - 1;  // the last row and column: the tail tiles
            const auto row = matmul(f32(Vec(A.begin() + i * k, A.begin() + (i + 1) * k), {1, k}), b).to_vector();
            Vec col_b(k);
            for (std::size_t q = 0; q < k; ++q) col_b[q] = B[q * m + j];
            const auto col = matmul(a, f32(col_b, {k, 1})).to_vector();
            bool same = true;
            for (std::size_t c = 0; c < m; ++c) same = same && row[c] == yv[i * m + c];
            for (std::size_t r = 0; r < n; ++r) same = same && col[r] == yv[r * m + j];
            BOOST_TEST(same);
          }
    }
  }
  // The AVX-512 and AVX2 micro-kernels fuse the same multiply-adds in the same order.
  const auto paths = supported_cpu_paths();
  if (std::find(paths.begin(), paths.end(), CpuPath::Avx512) != paths.end()) {
    const Vec A = round32(vals(31 * 29, 97)), B = round32(vals(29 * 30, 98));
    set_cpu_path(CpuPath::Avx512);
    const auto y512 = matmul(f32(A, {31, 29}), f32(B, {30, 29}), false, true).to_vector();
    set_cpu_path(CpuPath::Avx2);
    const auto y2 = matmul(f32(A, {31, 29}), f32(B, {30, 29}), false, true).to_vector();
    BOOST_TEST(y512 == y2);
  }
  set_cpu_path(before);
}

// `half` (M x N, row stride N) = op(A) op(B) / 2 computed in float32 (alpha = 1/2: exact),
// for strided A (lda) and B (ldb): within the derived float32 bound of the product.
static boost::test_tools::predicate_result half_product_within_bound(const std::vector<float>& A, std::size_t lda, bool ta,
                                                                     const std::vector<float>& B, std::size_t ldb, bool tb,
                                                                     std::size_t M, std::size_t N, std::size_t K,
                                                                     const std::vector<float>& half) {
  Vec a_mk(M * K), b_kn(K * N), y(M * N);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t k = 0; k < K; ++k) a_mk[i * K + k] = ta ? A[k * lda + i] : A[i * lda + k];
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t j = 0; j < N; ++j) b_kn[k * N + j] = tb ? B[j * ldb + k] : B[k * ldb + j];
  for (std::size_t i = 0; i < M * N; ++i) y[i] = 2.0 * double(half[i]);
  return test::gemm_f32_within_bound(f32(y, {M, N}), a_mk, b_kn, M, K, N);
}

// The small GEMM's contract with strided operands, as attention's per-head products use it
// (a head's columns inside a wider row, accumulated with beta = 1): it writes C's M x N block
// only (a 4-row, 16-column tile never spills into the next head's columns or rows), never reads
// C for beta 0 (NaN there stays out), and for beta != 0 gives alpha op(A) op(B) + beta C with
// both products rounded before the sum, the bits of the beta 0 product plus beta C.
BOOST_AUTO_TEST_CASE(small_float32_gemm_writes_its_block_only_and_reads_c_only_for_beta) {
  const CpuPath before = cpu_path();
  constexpr float kSentinel = 1234.5f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    for (const auto& mnk : {std::array<std::size_t, 3>{1, 1, 1}, std::array<std::size_t, 3>{3, 8, 5},
                            std::array<std::size_t, 3>{4, 16, 16}, std::array<std::size_t, 3>{7, 17, 3},
                            std::array<std::size_t, 3>{6, 32, 9}, std::array<std::size_t, 3>{32, 31, 32}}) {
      const std::size_t M = mnk[0], N = mnk[1], K = mnk[2];
      for (int flags = 0; flags < 4; ++flags) {
        const bool ta = flags & 1, tb = flags & 2;
        const std::size_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;  // strided, as heads are
        std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb);
        const Vec av = round32(vals(A.size(), 31)), bv = round32(vals(B.size(), 32));
        std::copy(av.begin(), av.end(), A.begin());
        std::copy(bv.begin(), bv.end(), B.begin());
        const Vec cv = round32(vals(M * N, 33));  // C before a beta != 0 product
        const std::size_t rows = M + 2;  // two rows of C below the block
        std::vector<float> dense(M * N), c0(rows * ldc, kSentinel), c1(rows * ldc, kSentinel);
        for (std::size_t i = 0; i < M; ++i)
          for (std::size_t j = 0; j < N; ++j) c0[i * ldc + j] = nan, c1[i * ldc + j] = float(cv[i * N + j]);
        const float alpha = 0.5f, beta = -1.5f;  // beta C is rounded: a fused sum would differ
        detail::gemm<float>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0f, dense.data(), N);
        detail::gemm<float>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0f, c0.data(), ldc);
        detail::gemm<float>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, c1.data(), ldc);
        BOOST_TEST_CONTEXT(cpu_path_name(path) << " M " << M << " N " << N << " K " << K << " ta " << ta << " tb "
                                               << tb) {
          std::size_t wrong0 = 0, wrong1 = 0, outside = 0;
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < ldc; ++j) {
              if (i >= M || j >= N) {
                outside += c0[i * ldc + j] != kSentinel || c1[i * ldc + j] != kSentinel;
                continue;
              }
              const float y = dense[i * N + j], scaled = beta * float(cv[i * N + j]);
              wrong0 += c0[i * ldc + j] != y;
              wrong1 += c1[i * ldc + j] != y + scaled;
            }
          BOOST_TEST(outside == 0u);
          BOOST_TEST(wrong0 == 0u);
          BOOST_TEST(wrong1 == 0u);
          // and the product itself: within the derived bound of op(A) op(B)
          BOOST_TEST(half_product_within_bound(A, lda, ta, B, ldb, tb, M, N, K, dense));
        }
      }
    }
  }
  set_cpu_path(before);
}

// detail::transpose (16 x 16 AVX-512 and 8 x 8 AVX2 register blocks, scalar edges): exact on
// every path, strided on both sides, writes the (cols, rows) block of dst and nothing else.
// Shapes: every edge of the 8 x 8 blocks (rows 1..23 x cols 1..17), and several blocks each
// way with rows > cols and cols > rows (the register blocks run source rows outer or
// destination rows outer, whichever side is shorter).
BOOST_AUTO_TEST_CASE(float32_transpose_exact_on_every_cpu_path) {
  const CpuPath before = cpu_path();
  constexpr float kSentinel = -7.25f;
  std::vector<std::array<std::size_t, 2>> shapes{{16, 16}, {17, 33}, {40, 70}, {3, 48}, {64, 5},
                                                 {32, 48}, {129, 100}, {48, 96}, {96, 48}, {64, 512}};
  for (std::size_t rows : {1, 7, 8, 9, 16, 23})
    for (std::size_t cols : {1, 5, 8, 15, 17}) shapes.push_back({rows, cols});
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    for (const auto& rc : shapes) {
      const std::size_t rows = rc[0], cols = rc[1], lds = cols + 3, ldd = rows + 5;
      // src ends at the last row's last element (no read past it under AddressSanitizer)
      std::vector<float> src((rows - 1) * lds + cols), dst(cols * ldd + 4, kSentinel);
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = float(i) * 0.5f - 3.0f;  // exact in float32
      detail::transpose(rows, cols, src.data(), lds, dst.data(), ldd);
      std::size_t wrong = 0, outside = 0;
      for (std::size_t j = 0; j < cols; ++j)
        for (std::size_t i = 0; i < ldd; ++i)
          (i < rows ? wrong : outside) += dst[j * ldd + i] != (i < rows ? src[i * lds + j] : kSentinel);
      for (std::size_t k = cols * ldd; k < dst.size(); ++k) outside += dst[k] != kSentinel;
      BOOST_TEST_CONTEXT(cpu_path_name(path) << " rows " << rows << " cols " << cols) {
        BOOST_TEST(wrong == 0u);
        BOOST_TEST(outside == 0u);
      }
    }
  }
  set_cpu_path(before);
}

// xgrad's own GEMM at attention's and mid-sized linear layers' sizes (detail::tiled_gemm:
// 8 x 32 AVX-512 tiles (12 x 32 from 192 rows, a panel's last tile of up to 8 rows on an 8 x 32
// one: 200, 256 and 260 rows end so), 6 x 16 AVX2 and 4 x 16 baseline tiles, op(B) read as rows; gemm<float> with a
// transposed B packs it and runs the same), with strided operands and B sized exactly (a
// read past column N of its last row is outside the allocation: ASan in CI). It writes C's
// M x N block only, never reads C for beta 0, adds beta C as a separately rounded product,
// computes each element from its row of op(A) and column of op(B) alone (a 1-row or 1-column
// product gives the same bits), gives the same bits on the AVX-512 and AVX2 paths and the
// same as small_gemm (via gemm) on a shape both take, and stays within the float32 bound.
BOOST_AUTO_TEST_CASE(tiled_float32_gemm_contract_on_every_cpu_path) {
  const CpuPath before = cpu_path();
  constexpr float kSentinel = 1234.5f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::size_t M, N, K;
  };
  // K > 128 runs in chunks of 128 on the AVX-512 and baseline paths, K > 2048 in chunks of
  // 2048 on the AVX2 one (raw sums carried over: the same bits); M > 256 in row panels (AVX2:
  // fewer rows for K over 256, 48 at K 2100; 260 x 20 x 2100 runs through gemm<float> there, B
  // and B^T in column panels); the last four: gemm<float> cuts them into 2 row blocks of B
  // packed in column panels
  // (kPackBRows rows or more), 3 column blocks (tiled with B as rows, under 256 rows; and the
  // same with K 200, tiled only under the wide routing, OpenBLAS otherwise), and 3 column
  // blocks of B in column panels. At most 16 x 16 (the next five, and the 1 x N rows and M x 1
  // columns computed alone below): one pass on the AVX-512 path (tiny_gemm), the same bits
  const Case cases[] = {{16, 16, 16},     {12, 16, 7},      {16, 9, 64},     {5, 3, 200},    {8, 16, 1},
                        {64, 100, 70},    {13, 17, 5},      {9, 64, 33},     {70, 16, 64},
                        {1, 1, 1},        {31, 29, 32},     {40, 50, 300},   {9, 33, 129},   {100, 40, 2100}, {260, 20, 2100},
                        {130, 40, 70},    {300, 40, 300},   {600, 120, 256}, {200, 1000, 128},
                        {130, 1000, 200}, {256, 1000, 100}};
  std::vector<std::vector<float>> first_path;  // per case and transpose: the first fused path's C
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    // the wide routing: only the AVX-512 path outruns OpenBLAS's 256-bit (Haswell, Zen) kernels
    const std::string core = runtime_info().blas_core;
    if (path != CpuPath::Avx512 || core == "SkylakeX" || core == "Cooperlake") BOOST_TEST(!detail::own_kernels_wider_than_blas());
    if (path == CpuPath::Avx512 && (core == "Haswell" || core == "Zen")) BOOST_TEST(detail::own_kernels_wider_than_blas());
    std::size_t run = 0;
    for (const Case& cs : cases)
      for (int ta = 0; ta < 2; ++ta, ++run) {
        const std::size_t M = cs.M, N = cs.N, K = cs.K;
        const std::size_t lda = (ta ? M : K) + 3, ldb = N + 5, ldc = N + 7;
        const Vec av = round32(vals((ta ? K : M) * lda, 41)), bv = round32(vals((K - 1) * ldb + N, 42));
        const std::vector<float> A(av.begin(), av.end()), B(bv.begin(), bv.end());
        const Vec cv = round32(vals(M * N, 43));
        const std::size_t rows = M + 2;
        std::vector<float> c0(rows * ldc, kSentinel), c1(rows * ldc, kSentinel);
        for (std::size_t i = 0; i < M; ++i)
          for (std::size_t j = 0; j < N; ++j) c0[i * ldc + j] = nan, c1[i * ldc + j] = float(cv[i * N + j]);
        const float alpha = 0.5f, beta = -1.5f;
        detail::tiled_gemm(ta, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0f, c0.data(), ldc);
        detail::tiled_gemm(ta, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, c1.data(), ldc);
        // the last row by itself, the last column by itself
        std::vector<float> row(N), col(M);
        const float* a_last = ta ? A.data() + (M - 1) : A.data() + (M - 1) * lda;
        detail::tiled_gemm(ta, 1, N, K, alpha, a_last, lda, B.data(), ldb, 0.0f, row.data(), N);
        detail::tiled_gemm(ta, M, 1, K, alpha, A.data(), lda, B.data() + (N - 1), ldb, 0.0f, col.data(), 1);
        BOOST_TEST_CONTEXT(cpu_path_name(path) << " M " << M << " N " << N << " K " << K << " ta " << ta) {
          std::size_t outside = 0, wrong1 = 0, alone = 0;
          std::vector<float> block(M * N);
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < ldc; ++j) {
              if (i >= M || j >= N) {
                outside += c0[i * ldc + j] != kSentinel || c1[i * ldc + j] != kSentinel;
                continue;
              }
              const float y = block[i * N + j] = c0[i * ldc + j];
              wrong1 += c1[i * ldc + j] != y + beta * float(cv[i * N + j]);
            }
          for (std::size_t j = 0; j < N; ++j) alone += row[j] != block[(M - 1) * N + j];
          for (std::size_t i = 0; i < M; ++i) alone += col[i] != block[i * N + N - 1];
          BOOST_TEST(outside == 0u);
          BOOST_TEST(wrong1 == 0u);
          BOOST_TEST(alone == 0u);
          BOOST_TEST(half_product_within_bound(A, lda, ta, B, ldb, false, M, N, K, block));
          // op(B) in column panels (tiled_gemm_bpanels, as attention packs K^T and V^T): the same
          // bits as read from rows, on every path the CPU runs (baseline and AVX2: 16-column
          // panels and tiles; AVX-512: 32-column panels, read by 32-column tiles and, for N <= 16
          // or M <= 32, by 16-column ones); the unwritten columns of the last panel are NaN,
          // which a read at a wrong offset would carry into C
          const std::size_t w = detail::bpanel_width();
          // (packed from B and from B^T: the same panels)
          std::vector<float> bt(N * (K + 3)), panels(detail::bpanels_size(N, K, w), nan), from_bt(panels);
          for (std::size_t k = 0; k < K; ++k)
            for (std::size_t j = 0; j < N; ++j) bt[j * (K + 3) + k] = B[k * ldb + j];
          detail::pack_bpanels(false, K, N, B.data(), ldb, panels.data(), w);
          detail::pack_bpanels(true, K, N, bt.data(), K + 3, from_bt.data(), w);
          BOOST_TEST((std::memcmp(panels.data(), from_bt.data(), panels.size() * sizeof(float)) == 0));
          std::vector<float> p0(rows * ldc, kSentinel), p1(rows * ldc, kSentinel);
          for (std::size_t i = 0; i < M; ++i)
            for (std::size_t j = 0; j < N; ++j) p0[i * ldc + j] = nan, p1[i * ldc + j] = float(cv[i * N + j]);
          detail::tiled_gemm_bpanels(ta, M, N, K, alpha, A.data(), lda, panels.data(), w, 0.0f, p0.data(), ldc);
          detail::tiled_gemm_bpanels(ta, M, N, K, alpha, A.data(), lda, panels.data(), w, beta, p1.data(), ldc);
          BOOST_TEST((std::memcmp(p0.data(), c0.data(), p0.size() * sizeof(float)) == 0));
          BOOST_TEST((std::memcmp(p1.data(), c1.data(), p1.size() * sizeof(float)) == 0));
          const bool small = M <= detail::kSmallGemmMax && N <= detail::kSmallGemmMax && K <= detail::kSmallGemmMax;
          // gemm<float> where it runs these kernels (small_gemm, or tiled_gemm_fits: on this path
          // and OpenBLAS kernel family; every product but a short NT one where OpenBLAS's kernels
          // are narrower than the AVX-512 path's, test-matrix.sh's OPENBLAS_CORETYPE=Haswell)
          if (small || detail::tiled_gemm_fits(ta, false, M, N, K)) {
            std::vector<float> y_nn(M * N);
            detail::gemm<float>(ta, false, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0f, y_nn.data(), N);
            BOOST_TEST((y_nn == block));
            // and with beta: C read on every route (B as rows, in panels, in row or column blocks)
            std::vector<float> y_beta(rows * ldc, kSentinel);
            for (std::size_t i = 0; i < M; ++i)
              for (std::size_t j = 0; j < N; ++j) y_beta[i * ldc + j] = float(cv[i * N + j]);
            detail::gemm<float>(ta, false, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, y_beta.data(), ldc);
            BOOST_TEST((std::memcmp(y_beta.data(), c1.data(), c1.size() * sizeof(float)) == 0));
          }
          if (small || detail::tiled_gemm_fits(ta, true, M, N, K)) {
            // gemm<float> with a transposed B (N, K): packed, then the same kernels
            const std::size_t ldt = K + 1;
            std::vector<float> Bt(N * ldt), y_nt(M * N);
            for (std::size_t k = 0; k < K; ++k)
              for (std::size_t j = 0; j < N; ++j) Bt[j * ldt + k] = B[k * ldb + j];
            detail::gemm<float>(ta, true, M, N, K, alpha, A.data(), lda, Bt.data(), ldt, 0.0f, y_nt.data(), N);
            BOOST_TEST((y_nt == block));
          }
          if (path == CpuPath::Baseline) continue;  // the fused paths: the same bits
          if (first_path.size() <= run) first_path.push_back(block);
          else BOOST_TEST((first_path[run] == block));
        }
      }
  }
  set_cpu_path(before);
}

// Products with op(A) = A^T over a long K (weight gradients: K the positions), which the AVX2
// path runs on op(A) and op(B) packed first (ops/tiled_gemm.cpp, packs_transposed_a: K >= 256,
// from 64 rows, or any rows under a k map) and the AVX-512 path reads in place: on both, each
// element is the fused chain acc = fma(a_ik, b_kj, acc) over the k (or the k map's k) in order,
// then alpha acc rounded (+ beta C or + bias, rounded), computed here with std::fma. Shapes on
// both sides of the thresholds, M and N off the 8-row blocks and 16-column panels, K off the
// 8-k blocks, past the AVX2 path's 2,048-k chunk; strided A, B and C, C untouched outside.
BOOST_AUTO_TEST_CASE(transposed_a_products_are_the_fused_chain_packed_or_in_place) {
  const CpuPath before = cpu_path();
  constexpr float kSentinel = 1234.5f;
  struct Case {
    std::size_t M, N, K;
    bool map;  // every k but those = 3 mod 5: K * 4 / 5 of them
  };
  const Case cases[] = {{64, 64, 256, false}, {70, 40, 301, false}, {63, 17, 300, false}, {192, 64, 574, false},
                        {11, 64, 1024, true}, {67, 33, 1021, true}, {5, 100, 300, true},   {100, 20, 2100, false},
                        {64, 64, 255, true},  {130, 70, 2100, true}};
  std::size_t fused = 0;
  for (CpuPath path : supported_cpu_paths()) {
    if (path == CpuPath::Baseline) continue;  // rounds each product: not the fused chain
    ++fused;
    set_cpu_path(path);
    for (const Case& cs : cases) {
      const std::size_t M = cs.M, N = cs.N, K = cs.K;
      const std::size_t lda = M + 3, ldb = N + 5, ldc = N + 7;
      const Vec av = round32(vals(K * lda, 61)), bv = round32(vals(K * ldb, 62)), cv = round32(vals(M * N, 63));
      const Vec biasv = round32(vals(N, 64));
      const std::vector<float> A(av.begin(), av.end()), B(bv.begin(), bv.end()), bias(biasv.begin(), biasv.end());
      std::vector<std::size_t> ks;
      for (std::size_t k = 0; k < K; ++k)
        if (!cs.map || k % 5 != 3) ks.push_back(k);
      const std::size_t Kr = ks.size();  // the k summed over
      const float alpha = 0.5f, beta = -1.5f;
      for (int variant = 0; variant < 3; ++variant) {  // beta 0, beta, bias
        std::vector<float> got((M + 2) * ldc, kSentinel);
        for (std::size_t i = 0; i < M; ++i)
          for (std::size_t j = 0; j < N; ++j) got[i * ldc + j] = float(cv[i * N + j]);
        detail::tiled_gemm(true, M, N, Kr, alpha, A.data(), lda, B.data(), ldb, variant == 1 ? beta : 0.0f, got.data(),
                           ldc, variant == 2 ? bias.data() : nullptr, nullptr, cs.map ? ks.data() : nullptr);
        std::size_t wrong = 0, outside = 0;
        for (std::size_t i = 0; i < M + 2; ++i)
          for (std::size_t j = 0; j < ldc; ++j) {
            const float y = got[i * ldc + j];
            if (i >= M || j >= N) {
              outside += y != kSentinel;
              continue;
            }
            float acc = 0.0f;
            for (std::size_t k : ks) acc = std::fma(A[k * lda + i], B[k * ldb + j], acc);
            float want = alpha * acc;
            if (variant == 1) want = want + beta * float(cv[i * N + j]);
            if (variant == 2) want = want + bias[j];
            wrong += std::memcmp(&y, &want, sizeof y) != 0;
          }
        BOOST_TEST(wrong == 0u, cpu_path_name(path) << " M " << M << " N " << N << " K " << K << " map " << cs.map
                                                    << " variant " << variant);
        BOOST_TEST(outside == 0u);
      }
    }
  }
  if (fused == 0) BOOST_TEST_MESSAGE("transposed_a products: this CPU runs the baseline path only");
  set_cpu_path(before);
}

// gemm<float> skips rows of exact zeros in A as stored (ops/detail.cpp, "Rows of exact zeros"):
// op(A)'s zero rows (dX = dY W, B as rows or transposed) and, A transposed, its zero k rows
// (dW = dY^T X). Zero rows as a padded batch leaves them (rows 16 s + t, t past a length of
// 1..16), row 9 as -0s; kept row 0 nonzero in its last element only (row lengths with 1, 15
// and 0 floats past the last whole 16, so the scans' tails decide it). On every CPU path the
// skip runs (gemm_zero_row_skips), and against tiled_gemm on the same operands (which never
// skips): where both the full and the reduced product run xgrad's kernels, C is the full
// product's bit for bit, else within the float32 bound; a skipped row of C is alpha * 0 (-0 for
// a negative alpha), C outside its block untouched; the same bits at 1 and 2 threads; and an
// inf in B where a zero row meets it (also as a row's last element) gives the full product's
// NaNs, the whole product running.
BOOST_AUTO_TEST_CASE(float32_gemm_skips_rows_of_zeros_with_the_full_products_results) {
  const CpuPath before = cpu_path();
  const int threads_before = num_threads();
  constexpr float kSentinel = 1234.5f;
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    bool ta, tb;
    std::size_t M, N, K;
  };
  // the reverse model's linear layers' input and weight gradients, its 11-column output
  // layer, row lengths 97 and 79, two whose kept rows run in 2 blocks (tiled_gemm with a row
  // map; 2,048 rows: blocks of rows, 600: of columns), and two that OpenBLAS runs on most paths
  // (K 300; a 512 x 512 weight gradient)
  const Case cases[] = {{false, false, 1024, 64, 192}, {false, false, 1024, 192, 64},  {false, true, 1024, 11, 64},
                        {false, true, 300, 64, 97},    {true, false, 192, 64, 1024},   {true, false, 11, 64, 1024},
                        {true, false, 79, 128, 600},   {false, false, 2048, 128, 128}, {false, false, 600, 512, 128},
                        {false, false, 600, 300, 300}, {true, false, 512, 512, 700}};
  const auto padded = [](std::size_t r) { return r % 16 >= 1 + (r / 16 * 7) % 16; };
  const auto same = [](float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0 || (std::isnan(x) && std::isnan(y)); };
  BOOST_TEST(padded(9));
  BOOST_TEST(padded(3));
  BOOST_TEST(!padded(0));
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    for (const Case& cs : cases) {
      const std::size_t M = cs.M, N = cs.N, K = cs.K;
      const std::size_t stored_rows = cs.ta ? K : M, stored_cols = cs.ta ? M : K;  // A as stored
      const std::size_t lda = stored_cols + 3, ldb = (cs.tb ? K : N) + 5, ldc = N + 7;
      const Vec av = round32(vals(stored_rows * lda, 51)), bv = round32(vals((cs.tb ? N : K) * ldb, 52));
      std::vector<float> A(av.begin(), av.end()), B(bv.begin(), bv.end());
      std::size_t zeros = 0;
      for (std::size_t r = 0; r < stored_rows; ++r)
        if (padded(r)) {
          ++zeros;
          std::fill_n(A.data() + r * lda, stored_cols, r == 9 ? -0.0f : 0.0f);
        }
      std::fill_n(A.data(), stored_cols - 1, 0.0f);  // row 0: nonzero in its last element only
      A[stored_cols - 1] = 0.75f;
      // op(B) as rows for tiled_gemm
      std::vector<float> Bk(K * N);
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t j = 0; j < N; ++j) Bk[k * N + j] = cs.tb ? B[j * ldb + k] : B[k * ldb + j];
      const std::size_t kept = stored_rows - zeros;
      const bool bits = cs.ta ? detail::tiled_gemm_fits(true, false, M, N, K) && detail::tiled_gemm_fits(true, false, M, N, kept)
                              : detail::tiled_gemm_fits(false, cs.tb, M, N, K) && detail::tiled_gemm_fits(false, cs.tb, kept, N, K);
      BOOST_TEST_CONTEXT(cpu_path_name(path) << " ta " << cs.ta << " tb " << cs.tb << " M " << M << " N " << N << " K " << K
                                             << (bits ? " (xgrad's kernels)" : " (OpenBLAS)")) {
        for (float alpha : {0.5f, -0.5f}) {
          std::vector<float> got((M + 2) * ldc, kSentinel), ref(M * N);
          set_num_threads(1);
          const std::size_t skips = detail::gemm_zero_row_skips();
          detail::gemm<float>(cs.ta, cs.tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0f, got.data(), ldc);
          BOOST_TEST(detail::gemm_zero_row_skips() == skips + 1);  // the rows were skipped
          detail::tiled_gemm(cs.ta, M, N, K, alpha, A.data(), lda, Bk.data(), N, 0.0f, ref.data(), N);
          std::vector<float> two((M + 2) * ldc, kSentinel);
          set_num_threads(2);
          detail::gemm<float>(cs.ta, cs.tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0f, two.data(), ldc);
          BOOST_TEST((std::memcmp(got.data(), two.data(), got.size() * sizeof(float)) == 0));
          std::size_t outside = 0, differ = 0, zero_rows_wrong = 0, row0_zero = 0;
          std::vector<float> block(M * N);
          for (std::size_t i = 0; i < M + 2; ++i)
            for (std::size_t j = 0; j < ldc; ++j) {
              const float y = got[i * ldc + j];
              if (i >= M || j >= N) {
                outside += y != kSentinel;
                continue;
              }
              block[i * N + j] = y;
              differ += !same(y, ref[i * N + j]);
              if (!cs.ta && padded(i)) zero_rows_wrong += !same(y, alpha * 0.0f);
              if (!cs.ta && i == 0) row0_zero += y == 0.0f;
            }
          BOOST_TEST(outside == 0u);
          BOOST_TEST(zero_rows_wrong == 0u);
          BOOST_TEST(row0_zero == 0u);  // row 0 was kept
          if (bits) BOOST_TEST(differ == 0u);
          if (alpha == 0.5f) BOOST_TEST(half_product_within_bound(A, lda, cs.ta, B, ldb, cs.tb, M, N, K, block));
        }
        // an inf in op(B) that meets the zero rows (A not transposed: every row of op(B) does;
        // transposed: rows 3 and the last padded k): at (3, 2), and as the last element of a
        // stored row of B
        std::size_t last_padded = K - 1;
        while (cs.ta && !padded(last_padded)) --last_padded;
        const std::pair<std::size_t, std::size_t> spots[] = {{3, 2}, {cs.tb ? last_padded : 3, cs.tb ? 2 : N - 1}};
        for (const auto& [k, j] : spots) {
          std::vector<float> Binf = B, Bkinf = Bk;
          (cs.tb ? Binf[j * ldb + k] : Binf[k * ldb + j]) = inf;
          Bkinf[k * N + j] = inf;
          std::vector<float> got(M * N), ref(M * N);
          set_num_threads(1);
          const std::size_t skips = detail::gemm_zero_row_skips();
          detail::gemm<float>(cs.ta, cs.tb, M, N, K, 0.5f, A.data(), lda, Binf.data(), ldb, 0.0f, got.data(), N);
          BOOST_TEST(detail::gemm_zero_row_skips() == skips);  // the whole product ran
          detail::tiled_gemm(cs.ta, M, N, K, 0.5f, A.data(), lda, Bkinf.data(), N, 0.0f, ref.data(), N);
          std::size_t nans = 0, nan_differ = 0;
          for (std::size_t i = 0; i < M * N; ++i) {
            nans += std::isnan(ref[i]);
            nan_differ += std::isnan(got[i]) != std::isnan(ref[i]);
          }
          BOOST_TEST(nans > 0u, "inf at (" << k << ", " << j << ")");
          BOOST_TEST(nan_differ == 0u, "inf at (" << k << ", " << j << ")");
        }
      }
    }
  }
  set_num_threads(threads_before);
  set_cpu_path(before);
}

// detail::ZeroRowsScope (linear's backward: G scanned once for dX = G W and dW = G^T X): the
// innermost scope answers for exactly its matrix (pointer, rows, cols, contiguous), with the
// rows that are not all +-0; both products skip G's zero rows under it and give the bits they
// give without it, on every CPU path; linear's gradients are those of the two products.
BOOST_AUTO_TEST_CASE(zero_rows_scope_shares_one_scan_and_changes_no_bit) {
  const CpuPath before = cpu_path();
  const std::size_t N = 1024, out = 64, in = 128;
  const auto padded = [](std::size_t r) { return r % 16 >= 1 + (r / 16 * 7) % 16; };
  const Vec gv = round32(vals(N * out, 61)), wv = round32(vals(out * in, 62)), xv = round32(vals(N * in, 63));
  std::vector<float> G(gv.begin(), gv.end()), W(wv.begin(), wv.end()), X(xv.begin(), xv.end());
  std::vector<std::size_t> expect;
  for (std::size_t r = 0; r < N; ++r) {
    if (padded(r)) std::fill_n(G.data() + r * out, out, r == 9 ? -0.0f : 0.0f);
    else expect.push_back(r);
  }
  BOOST_TEST(!detail::scoped_nonzero_rows(G.data(), N, out, out));  // no scope
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    BOOST_TEST_CONTEXT(cpu_path_name(path)) {
      std::vector<float> dx0(N * in), dw0(out * in), dx1(N * in), dw1(out * in);
      detail::gemm<float>(false, false, N, in, out, 1.0f, G.data(), out, W.data(), in, 0.0f, dx0.data(), in);
      detail::gemm<float>(true, false, out, in, N, 1.0f, G.data(), out, X.data(), in, 0.0f, dw0.data(), in);
      {
        const detail::ZeroRowsScope scope(G.data(), N, out);
        const std::size_t skips = detail::gemm_zero_row_skips();
        detail::gemm<float>(false, false, N, in, out, 1.0f, G.data(), out, W.data(), in, 0.0f, dx1.data(), in);
        detail::gemm<float>(true, false, out, in, N, 1.0f, G.data(), out, X.data(), in, 0.0f, dw1.data(), in);
        BOOST_TEST(detail::gemm_zero_row_skips() == skips + 2);
        const std::vector<std::size_t>* kept = detail::scoped_nonzero_rows(G.data(), N, out, out);
        BOOST_REQUIRE(kept);
        BOOST_TEST((*kept == expect));
        BOOST_TEST(!detail::scoped_nonzero_rows(G.data(), N, out, out + 1));  // not that matrix
        BOOST_TEST(!detail::scoped_nonzero_rows(G.data(), N - 1, out, out));
        BOOST_TEST(!detail::scoped_nonzero_rows(G.data() + out, N - 1, out, out));
        {
          const detail::ZeroRowsScope inner(X.data(), N, in);
          BOOST_TEST(!detail::scoped_nonzero_rows(G.data(), N, out, out));  // the innermost answers
          const std::vector<std::size_t>* all = detail::scoped_nonzero_rows(X.data(), N, in, in);
          BOOST_REQUIRE(all);
          BOOST_TEST(all->size() == N);
        }
        BOOST_TEST(detail::scoped_nonzero_rows(G.data(), N, out, out) == kept);
        const detail::ZeroRowsScope inactive(nullptr, N, out);
        BOOST_TEST(!detail::scoped_nonzero_rows(G.data(), N, out, out));
      }
      BOOST_TEST(!detail::scoped_nonzero_rows(G.data(), N, out, out));
      BOOST_TEST((std::memcmp(dx0.data(), dx1.data(), dx0.size() * sizeof(float)) == 0));
      BOOST_TEST((std::memcmp(dw0.data(), dw1.data(), dw0.size() * sizeof(float)) == 0));
      // linear's backward: dX = G W and dW = G^T X, the very bits of the two ops alone
      const Vec g64(G.begin(), G.end()), w64(W.begin(), W.end()), x64(X.begin(), X.end());
      Tensor x = tensor(x64, {N, in}, DType::Float32).set_requires_grad();
      Tensor w = tensor(w64, {out, in}, DType::Float32).set_requires_grad();
      Tensor g = tensor(g64, {N, out}, DType::Float32);
      sum(mul(linear(x, w), g)).backward();
      BOOST_TEST((x.grad().to_vector() == matmul(g, w.detach()).to_vector()));
      BOOST_TEST((w.grad().to_vector() == sum_outer(g, x.detach()).to_vector()));
      BOOST_TEST((x.grad().to_vector() == Vec(dx0.begin(), dx0.end())));
    }
  }
  set_cpu_path(before);
}

// gemm with a row bias (linear's bias, added in xgrad's kernels' epilogue rather than copied
// into C first): on every CPU path, every route (small_gemm, tiled_gemm, BLAS; row and
// column blocks; k chunks; column tails; K = 0) the same bits as bias copied into C with
// beta 1, the old way and BLAS's still; C outside its M x N block untouched. And linear(x, w, b)
// is exactly matmul(x, w^T) + b where xgrad's own kernels run the product (one rounding each).
BOOST_AUTO_TEST_CASE(float32_gemm_row_bias_equals_bias_copied_with_beta_one) {
  const CpuPath before = cpu_path();
  constexpr float kSentinel = -99.5f;
  struct Case {
    std::size_t M, N, K;
  };
  // small; tiled with column tails and k chunks; column blocks (N > M); K = 0; K > 256 (BLAS
  // unless the wide routing, or 256 rows or more on the AVX2 path: 300 x 70 x 300); B not
  // transposed in column panels: one block (1024 x 40 x 256),
  // 2 row blocks (600 x 120 x 256), 3 column blocks (256 x 1000 x 100)
  const Case cases[] = {{5, 7, 3},       {32, 32, 32},    {130, 37, 70}, {200, 100, 200}, {1024, 40, 256},
                        {128, 2048, 64}, {64, 2048, 300}, {9, 12, 0},    {300, 70, 300},  {256, 1000, 100},
                        {600, 120, 256}};
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    for (const Case& cs : cases)
      for (int tb = 0; tb < 2; ++tb) {
        const std::size_t M = cs.M, N = cs.N, K = cs.K, lda = K + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
        const Vec av = round32(vals(M * lda, 61)), bv = round32(vals((tb ? N : std::max<std::size_t>(K, 1)) * ldb, 62)),
                  biasv = round32(vals(N, 63));
        const std::vector<float> A(av.begin(), av.end()), B(bv.begin(), bv.end()), bias(biasv.begin(), biasv.end());
        std::vector<float> fused((M + 1) * ldc, kSentinel), copied((M + 1) * ldc, kSentinel);
        for (std::size_t i = 0; i < M; ++i) std::copy_n(bias.data(), N, copied.data() + i * ldc);
        const float alpha = 0.75f;
        detail::gemm<float>(false, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0f, fused.data(), ldc,
                            bias.data());
        detail::gemm<float>(false, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 1.0f, copied.data(), ldc);
        BOOST_TEST_CONTEXT(cpu_path_name(path) << " M " << M << " N " << N << " K " << K << " tb " << tb) {
          std::size_t differ = 0;
          for (std::size_t i = 0; i < fused.size(); ++i)
            differ += !(fused[i] == copied[i]);  // copied's sentinels outside the block: untouched both
          BOOST_TEST(differ == 0u);
          BOOST_TEST(fused[M * ldc] == kSentinel);
        }
      }
    // linear = matmul(x, w^T) + b bit for bit on xgrad's own kernels (small and tiled routes)
    for (const auto& xw : std::vector<std::array<std::size_t, 3>>{{{6, 9, 20}}, {{300, 64, 37}}, {{130, 200, 100}}}) {
      const std::size_t n = xw[0], in = xw[1], out = xw[2];
      if (!(n <= detail::kSmallGemmMax && in <= detail::kSmallGemmMax && out <= detail::kSmallGemmMax) &&
          !detail::tiled_gemm_fits(false, true, n, out, in))
        continue;
      Rng rng(64);
      const Tensor x = randn({n, in}, rng, DType::Float32), w = randn({out, in}, rng, DType::Float32),
                   b = randn({out}, rng, DType::Float32);
      BOOST_TEST_CONTEXT(cpu_path_name(path) << " linear x (" << n << ", " << in << ") w (" << out << ", " << in << ")") {
        BOOST_TEST((linear(x, w, b).to_vector() == add(matmul(x, w, false, true), b).to_vector()));
      }
    }
  }
  set_cpu_path(before);
}


// xgrad's own float64 GEMM (detail::tiled_gemm_f64: 8 x 16 AVX-512 and 6 x 8 AVX2 tiles, op(B)
// packed; gemm<double> runs it where OpenBLAS falls back to generic pre-AVX kernels), on every
// fused path the CPU runs, every transpose pair, strided operands, B sized exactly, row blocks
// (K 2100: one tile's rows per block), gemm<double>'s 2 row blocks (1024 x 64 x 256) and 2
// column blocks on op(B)'s panels packed once (64 x 1040 x 256), column tails: each element of
// C is the scalar chain acc = fma(a_ik, b_kj, acc) in order of k from 0, then alpha acc
// rounded, plus beta C (rounded) or plus bias_j, bit for bit (so the same bits on both paths
// and for any cut); nothing outside C's M x N block is written, C is never read for beta 0
// (NaN there).
BOOST_AUTO_TEST_CASE(tiled_float64_gemm_is_the_fused_chain_on_every_fused_path) {
  const CpuPath before = cpu_path();
  constexpr double kSentinel = 1234.5;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    std::size_t M, N, K;
  };
  const Case cases[] = {{1, 1, 1},      {13, 17, 5},     {64, 100, 70},    {9, 33, 129},   {70, 16, 64},
                        {100, 40, 2100}, {300, 23, 300}, {1024, 64, 256}, {64, 1040, 256}};
  const bool generic = detail::blas_core_is_generic(runtime_info().blas_core);
  std::size_t paths_run = 0;
  for (CpuPath path : supported_cpu_paths()) {
    set_cpu_path(path);
    BOOST_TEST(detail::own_f64_kernels() == (generic && path != CpuPath::Baseline));
    if (path == CpuPath::Baseline) continue;
    ++paths_run;
    for (const Case& cs : cases)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          const std::size_t M = cs.M, N = cs.N, K = cs.K;
          const std::size_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
          const Vec A = vals((ta ? K : M) * lda, 51), B = vals(((tb ? N : K) - 1) * ldb + (tb ? K : N), 52);
          const Vec cv = vals(M * N, 53), bias = vals(N, 54);
          const auto a = [&](std::size_t i, std::size_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; };
          const auto b = [&](std::size_t k, std::size_t j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; };
          const std::size_t rows = M + 2;
          Vec c0(rows * ldc, kSentinel), c1(rows * ldc, kSentinel), c2(rows * ldc, kSentinel);
          for (std::size_t i = 0; i < M; ++i)
            for (std::size_t j = 0; j < N; ++j) c0[i * ldc + j] = c2[i * ldc + j] = nan, c1[i * ldc + j] = cv[i * N + j];
          const double alpha = 0.75, beta = -1.25;
          detail::tiled_gemm_f64(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0, c0.data(), ldc);
          detail::tiled_gemm_f64(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, c1.data(), ldc);
          detail::tiled_gemm_f64(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0, c2.data(), ldc, bias.data());
          BOOST_TEST_CONTEXT(cpu_path_name(path) << " M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb) {
            std::size_t outside = 0, wrong0 = 0, wrong1 = 0, wrong2 = 0;
            for (std::size_t i = 0; i < rows; ++i)
              for (std::size_t j = 0; j < ldc; ++j) {
                if (i >= M || j >= N) {
                  outside += c0[i * ldc + j] != kSentinel || c1[i * ldc + j] != kSentinel || c2[i * ldc + j] != kSentinel;
                  continue;
                }
                double acc = 0.0;
                for (std::size_t k = 0; k < K; ++k) acc = std::fma(a(i, k), b(k, j), acc);
                volatile double y = alpha * acc, z = beta * cv[i * N + j];  // each rounded
                const double y1 = y + z, y2 = y + bias[j];
                wrong0 += c0[i * ldc + j] != y;
                wrong1 += c1[i * ldc + j] != y1;
                wrong2 += c2[i * ldc + j] != y2;
              }
            BOOST_TEST(outside == 0u);
            BOOST_TEST(wrong0 == 0u);
            BOOST_TEST(wrong1 == 0u);
            BOOST_TEST(wrong2 == 0u);
            if (detail::own_f64_kernels()) {  // gemm<double> routes here, in its row or column blocks
              Vec g(M * N);
              detail::gemm<double>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 0.0, g.data(), N);
              std::size_t differ = 0;
              for (std::size_t i = 0; i < M; ++i)
                for (std::size_t j = 0; j < N; ++j) differ += g[i * N + j] != c0[i * ldc + j];
              BOOST_TEST(differ == 0u);
            }
          }
        }
  }
  set_cpu_path(before);
  if (paths_run == 0) BOOST_TEST_MESSAGE("tiled_gemm_f64: this CPU runs the baseline path only");
}

BOOST_AUTO_TEST_CASE(matmul_batched_and_broadcast_batch) {
  // (2,3,4) x (2,4,5): per-batch products
  Vec A = vals(24, 101), B = vals(40, 102);
  Tensor y = matmul(f64(A, {2, 3, 4}), f64(B, {2, 4, 5}));
  BOOST_TEST(sh(y) == "(2, 3, 5)");
  Vec e;
  for (int bi = 0; bi < 2; ++bi) {
    Vec c = mm(A.data() + bi * 12, B.data() + bi * 20, 3, 4, 5, false, false);
    e.insert(e.end(), c.begin(), c.end());
  }
  BOOST_TEST(allclose(y, e, 1e-12, 1e-13));

  // broadcast batch (2,1,2,3) x (3,3,2) -> (2,3,2,2): y[i,j] = A[i,0] B[j]
  Vec A2 = vals(12, 103), B2 = vals(18, 104);
  Tensor y2 = matmul(f64(A2, {2, 1, 2, 3}), f64(B2, {3, 3, 2}));
  BOOST_TEST(sh(y2) == "(2, 3, 2, 2)");
  Vec e2;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      Vec c = mm(A2.data() + i * 6, B2.data() + j * 6, 2, 3, 2, false, false);
      e2.insert(e2.end(), c.begin(), c.end());
    }
  BOOST_TEST(allclose(y2, e2, 1e-12, 1e-13));

  // shared 2-D b: (2,3,4) x (4,2)
  Vec B3 = vals(8, 105);
  Tensor y3 = matmul(f64(A, {2, 3, 4}), f64(B3, {4, 2}));
  BOOST_TEST(sh(y3) == "(2, 3, 2)");
  Vec e3;
  for (int bi = 0; bi < 2; ++bi) {
    Vec c = mm(A.data() + bi * 12, B3.data(), 3, 4, 2, false, false);
    e3.insert(e3.end(), c.begin(), c.end());
  }
  BOOST_TEST(allclose(y3, e3, 1e-12, 1e-13));
  // b with a size-1 batch dim: (2,3,4) x (1,4,2)
  BOOST_TEST(allclose(matmul(f64(A, {2, 3, 4}), f64(B3, {1, 4, 2})), e3, 1e-12, 1e-13));

  // shared 2-D a: (3,4) x (2,4,2)
  Vec A4 = vals(12, 106), B4 = vals(16, 107);
  Tensor y4 = matmul(f64(A4, {3, 4}), f64(B4, {2, 4, 2}));
  BOOST_TEST(sh(y4) == "(2, 3, 2)");
  Vec e4;
  for (int bi = 0; bi < 2; ++bi) {
    Vec c = mm(A4.data(), B4.data() + bi * 8, 3, 4, 2, false, false);
    e4.insert(e4.end(), c.begin(), c.end());
  }
  BOOST_TEST(allclose(y4, e4, 1e-12, 1e-13));

  // float32 batched
  Tensor y32 = matmul(f32(A, {2, 3, 4}), f32(B, {2, 4, 5}));
  BOOST_TEST(y32.dtype() == DType::Float32);
  BOOST_TEST(allclose(y32, e, 1e-5, 1e-5));
}

BOOST_AUTO_TEST_CASE(matmul_batched_transpose_flags) {
  // a (2,1,n,k) [stored (2,1,k,n) if ta], b (3,k,m) [stored (3,m,k) if tb] -> (2,3,n,m)
  const std::size_t n = 2, k = 3, m = 4;
  Vec A = vals(2 * n * k, 111), B = vals(3 * k * m, 112);
  Vec e;
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      Vec c = mm(A.data() + i * n * k, B.data() + j * k * m, n, k, m, false, false);
      e.insert(e.end(), c.begin(), c.end());
    }
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      BOOST_TEST_CONTEXT("ta " << ta << " tb " << tb) {
        Vec As, Bs;
        for (std::size_t i = 0; i < 2; ++i) {
          Vec blk(A.begin() + i * n * k, A.begin() + (i + 1) * n * k);
          Vec t = ta ? tr(blk, n, k) : blk;
          As.insert(As.end(), t.begin(), t.end());
        }
        for (std::size_t j = 0; j < 3; ++j) {
          Vec blk(B.begin() + j * k * m, B.begin() + (j + 1) * k * m);
          Vec t = tb ? tr(blk, k, m) : blk;
          Bs.insert(Bs.end(), t.begin(), t.end());
        }
        Shape ash = ta ? Shape{2, 1, k, n} : Shape{2, 1, n, k};
        Shape bsh = tb ? Shape{3, m, k} : Shape{3, k, m};
        Tensor y = matmul(f64(As, ash), f64(Bs, bsh), ta, tb);
        BOOST_TEST(sh(y) == "(2, 3, 2, 4)");
        BOOST_TEST(allclose(y, e, 1e-12, 1e-13));
        // shared 2-D b with flags: a (2,...) x b[0]
        Vec B0(Bs.begin(), Bs.begin() + k * m);
        Tensor y2 = matmul(f64(As, ash), f64(B0, tb ? Shape{m, k} : Shape{k, m}), ta, tb);
        BOOST_TEST(sh(y2) == "(2, 1, 2, 4)");
        Vec e2;
        for (std::size_t i = 0; i < 2; ++i) {
          Vec c = mm(A.data() + i * n * k, B.data(), n, k, m, false, false);
          e2.insert(e2.end(), c.begin(), c.end());
        }
        BOOST_TEST(allclose(y2, e2, 1e-12, 1e-13));
      }
    }
}

BOOST_AUTO_TEST_CASE(matmul_vector_operands) {
  // (3) x (3,2): row vector, dim dropped
  Tensor v = f64({1, 2, 3}, {3});
  Tensor M = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor vm = matmul(v, M);
  BOOST_TEST(sh(vm) == "(2)");
  BOOST_TEST(allclose(vm, {22, 28}, 0, 0));
  // (2,3) x (3): column vector
  Tensor Mv = matmul(f64({1, 2, 3, 4, 5, 6}, {2, 3}), v);
  BOOST_TEST(sh(Mv) == "(2)");
  BOOST_TEST(allclose(Mv, {14, 32}, 0, 0));
  // (2,3)^T stored as (3,2), times (3) with transpose_a
  Tensor Mtv = matmul(M, f64({1, -1}, {2}), false, false);
  BOOST_TEST(allclose(Mtv, {-1, -1, -1}, 0, 0));
  Tensor MTv = matmul(M, v, true, false);  // M^T (2,3) x v (3)
  BOOST_TEST(sh(MTv) == "(2)");
  BOOST_TEST(allclose(MTv, {22, 28}, 0, 0));
  // vector x batched: (3) x (2,3,2) -> (2,2)
  Tensor Bt = f64({1, 2, 3, 4, 5, 6, 0, 1, 0, 1, 0, 1}, {2, 3, 2});
  Tensor vb = matmul(v, Bt);
  BOOST_TEST(sh(vb) == "(2, 2)");
  BOOST_TEST(allclose(vb, {22, 28, 0, 6}, 0, 0));
  // batched x vector: (2,2,3) x (3) -> (2,2)
  Tensor bv = matmul(f64({1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 3}), v);
  BOOST_TEST(sh(bv) == "(2, 2)");
  BOOST_TEST(allclose(bv, {1, 2, 3, 6}, 0, 0));
  // float32
  BOOST_TEST(allclose(matmul(f32({1, 2, 3}, {3}), f32({1, 2, 3, 4, 5, 6}, {3, 2})), {22, 28}, 0, 0));
}

BOOST_AUTO_TEST_CASE(matmul_vector_dot_vector) {
  // torch.matmul of two 1-D tensors is their dot product, rank 0.
  Tensor d = matmul(f64({1, 2, 3}, {3}), f64({4, -5, 6}, {3}));
  BOOST_TEST(sh(d) == "()");
  BOOST_TEST(allclose(d, {12}, 0, 0));
}

BOOST_AUTO_TEST_CASE(matmul_empty_dims) {
  // Inner dim 0: zeros.
  Tensor y = matmul(f64({}, {2, 0}), f64({}, {0, 3}));
  BOOST_TEST(sh(y) == "(2, 3)");
  BOOST_TEST(allclose(y, {0, 0, 0, 0, 0, 0}, 0, 0));
  Tensor y32 = matmul(f32({}, {2, 2, 0}), f32({}, {0, 3}));
  BOOST_TEST(sh(y32) == "(2, 2, 3)");
  BOOST_TEST(allclose(y32, Vec(12, 0.0), 0, 0));
  // Empty batch.
  BOOST_TEST(sh(matmul(f64({}, {0, 3, 4}), f64(vals(8, 1), {4, 2}))) == "(0, 3, 2)");
}

BOOST_AUTO_TEST_CASE(linear_values) {
  const std::size_t in = 4, out = 3;
  Vec W = vals(out * in, 121), bias = vals(out, 122), X = vals(2 * 2 * in, 123);
  auto ref = [&](std::size_t rows, bool with_bias) {
    Vec y(rows * out);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < out; ++o) {
        double s = with_bias ? bias[o] : 0.0;
        for (std::size_t i = 0; i < in; ++i) s += X[r * in + i] * W[o * in + i];
        y[r * out + o] = s;
      }
    return y;
  };
  // 2-D, with and without bias
  Tensor x2 = f64(Vec(X.begin(), X.begin() + 2 * in), {2, in});
  Tensor y = linear(x2, f64(W, {out, in}), f64(bias, {out}));
  BOOST_TEST(sh(y) == "(2, 3)");
  BOOST_TEST(allclose(y, ref(2, true), 1e-12, 1e-13));
  Tensor yn = linear(x2, f64(W, {out, in}));
  BOOST_TEST(allclose(yn, ref(2, false), 1e-12, 1e-13));
  // 3-D input
  Tensor y3 = linear(f64(X, {2, 2, in}), f64(W, {out, in}), f64(bias, {out}));
  BOOST_TEST(sh(y3) == "(2, 2, 3)");
  BOOST_TEST(allclose(y3, ref(4, true), 1e-12, 1e-13));
  BOOST_TEST(allclose(linear(f64(X, {2, 2, in}), f64(W, {out, in})), ref(4, false), 1e-12, 1e-13));
  // 1-D input
  Tensor y1 = linear(f64(Vec(X.begin(), X.begin() + in), {in}), f64(W, {out, in}), f64(bias, {out}));
  BOOST_TEST(sh(y1) == "(3)");
  BOOST_TEST(allclose(y1, ref(1, true), 1e-12, 1e-13));
  // float32
  Tensor y32 = linear(f32(X, {2, 2, in}), f32(W, {out, in}), f32(bias, {out}));
  BOOST_TEST(y32.dtype() == DType::Float32);
  BOOST_TEST(allclose(y32, ref(4, true), 1e-5, 1e-5));
  // Hand case: W = [[1,0],[0,1],[1,1]], b = [0.5,0,-1], x = [2,3] -> [2.5,3,4]
  BOOST_TEST(allclose(linear(f64({2, 3}, {1, 2}), f64({1, 0, 0, 1, 1, 1}, {3, 2}), f64({0.5, 0, -1}, {3})),
                      {2.5, 3, 4}, 0, 0));
}

BOOST_AUTO_TEST_CASE(linear_zero_in_features) {
  // in_features = 0: x W^T is all zero, so every row is the bias.
  Tensor y = linear(f64({}, {2, 0}), f64({}, {3, 0}), f64({1, 2, 3}, {3}));
  BOOST_TEST(sh(y) == "(2, 3)");
  BOOST_TEST(allclose(y, {1, 2, 3, 1, 2, 3}, 0, 0));
  Tensor yn = linear(f64({}, {2, 0}), f64({}, {3, 0}));
  BOOST_TEST(allclose(yn, Vec(6, 0.0), 0, 0));
}

// ---------------------------------------------------------------------------------------
// softmax family
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(softmax_hand_values) {
  // softmax([0, ln 2, ln 3, ln 4]) = [1, 2, 3, 4] / 10
  Tensor x = f64({0, std::log(2.0), std::log(3.0), std::log(4.0)}, {4});
  BOOST_TEST(allclose(softmax(x), {0.1, 0.2, 0.3, 0.4}, 1e-14));
  BOOST_TEST(allclose(log_softmax(x), {std::log(0.1), std::log(0.2), std::log(0.3), std::log(0.4)}, 1e-13));
  // Shift invariance and huge values: no overflow.
  Tensor big = f64({1000, 1000 + std::log(2.0), 1000 + std::log(3.0), 1000 + std::log(4.0)}, {4});
  BOOST_TEST(allclose(softmax(big), {0.1, 0.2, 0.3, 0.4}, 1e-10));
  BOOST_TEST(allclose(log_softmax(big), {std::log(0.1), std::log(0.2), std::log(0.3), std::log(0.4)}, 1e-10));
  Tensor neg = f64({-1000, -1000}, {2});
  BOOST_TEST(allclose(softmax(neg), {0.5, 0.5}, 1e-14));
  // Size-1 axis: 1.
  BOOST_TEST(allclose(softmax(f64({3, -7}, {2, 1})), {1, 1}, 0, 0));
  BOOST_TEST(allclose(log_softmax(f64({3, -7}, {2, 1})), {0, 0}, 0, 1e-15));
}

BOOST_AUTO_TEST_CASE(softmax_axes_against_loops) {
  Vec xv = vals(24, 131, -3, 3);
  Tensor x = f64(xv, {2, 3, 4});
  // last axis
  Vec e = ref_softmax(xv, 6, 4);
  BOOST_TEST(sh(softmax(x)) == "(2, 3, 4)");
  BOOST_TEST(allclose(softmax(x, -1), e, 1e-13, 1e-15));
  BOOST_TEST(allclose(softmax(x, 2), e, 1e-13, 1e-15));
  BOOST_TEST(allclose(log_softmax(x), map(e, [](double v) { return std::log(v); }), 1e-12, 1e-14));
  // axis 1: gather columns into rows, softmax, scatter back
  Vec cols(24), e1(24);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j) cols[(i * 4 + k) * 3 + j] = xv[(i * 3 + j) * 4 + k];
  Vec sc = ref_softmax(cols, 8, 3);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j) e1[(i * 3 + j) * 4 + k] = sc[(i * 4 + k) * 3 + j];
  BOOST_TEST(allclose(softmax(x, 1), e1, 1e-13, 1e-15));
  BOOST_TEST(allclose(softmax(x, -2), e1, 1e-13, 1e-15));
  BOOST_TEST(allclose(log_softmax(x, 1), map(e1, [](double v) { return std::log(v); }), 1e-12, 1e-14));
  // axis 0 of (2, 3): columns of two
  Vec v2 = {1, 2, 3, 3, 2, 1};
  double a = 1 / (1 + std::exp(2.0)), b = 0.5;
  BOOST_TEST(allclose(softmax(f64(v2, {2, 3}), 0), {a, b, 1 - a, 1 - a, b, a}, 1e-14));
  // float32
  Tensor y32 = softmax(f32(xv, {2, 3, 4}));
  BOOST_TEST(y32.dtype() == DType::Float32);
  BOOST_TEST(allclose(y32, ref_softmax(round32(xv), 6, 4), 1e-5, 1e-6));
  Tensor l32 = log_softmax(f32(xv, {2, 3, 4}));
  BOOST_TEST(l32.dtype() == DType::Float32);
  BOOST_TEST(allclose(l32, map(ref_softmax(round32(xv), 6, 4), [](double v) { return std::log(v); }), 1e-5, 1e-5));
}

BOOST_AUTO_TEST_CASE(softmax_minus_inf_entries) {
  // -inf is excluded; an all -inf row is all zero (softmax) / all -inf (log_softmax).
  Tensor x = f64({0, -kInf, std::log(3.0), -kInf, -kInf, -kInf}, {2, 3});
  Tensor y = softmax(x);
  BOOST_TEST(allclose(y, {0.25, 0, 0.75, 0, 0, 0}, 1e-14));
  BOOST_TEST(test::all_finite(y));
  Tensor l = log_softmax(x);
  BOOST_TEST(allclose(l, {std::log(0.25), -kInf, std::log(0.75), -kInf, -kInf, -kInf}, 1e-13));
  for (double v : l.to_vector()) BOOST_TEST(!std::isnan(v));
  Tensor y32 = softmax(f32({0, -kInf, std::log(3.0), -kInf, -kInf, -kInf}, {2, 3}));
  BOOST_TEST(allclose(y32, {0.25, 0, 0.75, 0, 0, 0}, 1e-6, 1e-7));
}

BOOST_AUTO_TEST_CASE(masked_softmax_values) {
  // Row 0 partly masked, row 1 fully masked, row 2 open; the (3,4) mask broadcasts over
  // the batch of 2.
  std::vector<bool> m = {false, true, false, true, true, true, true, true, false, false, false, false};
  Tensor mask = bool_tensor(m, {3, 4});
  Vec xv = vals(24, 141, -3, 3);
  Tensor y = masked_softmax(f64(xv, {2, 3, 4}), mask);
  BOOST_TEST(sh(y) == "(2, 3, 4)");
  std::vector<bool> full;
  for (int b = 0; b < 2; ++b) full.insert(full.end(), m.begin(), m.end());
  Vec e = ref_softmax(xv, 6, 4, full);
  BOOST_TEST(allclose(y, e, 1e-13, 1e-15));
  BOOST_TEST(test::all_finite(y));
  // Hand case: [0, x, ln 3, x] with entries 1, 3 masked -> [0.25, 0, 0.75, 0]
  Tensor h = masked_softmax(f64({0, 123, std::log(3.0), -5}, {4}), bool_tensor({false, true, false, true}, {4}));
  BOOST_TEST(allclose(h, {0.25, 0, 0.75, 0}, 1e-14));
  // Mask (2,1) broadcast along the softmax axis: whole rows masked or open.
  Tensor r = masked_softmax(f64({1, 1, 5, 0, 0, 0}, {2, 3}), bool_tensor({true, false}, {2, 1}));
  BOOST_TEST(allclose(r, {0, 0, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-14));
  // Axis 0 with a causal mask; float32.
  Tensor c = masked_softmax(f32({0, 0, 0, 0}, {2, 2}), causal_mask(2), 0);
  // mask [[F,T],[F,F]]: column 0 open (0.5, 0.5), column 1 only row 1 allowed.
  BOOST_TEST(c.dtype() == DType::Float32);
  BOOST_TEST(allclose(c, {0.5, 0, 0.5, 1}, 1e-6));
}

BOOST_AUTO_TEST_CASE(masked_fill_values) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor same = masked_fill(x, bool_tensor({true, false, false, false, true, false}, {2, 3}), -9);
  BOOST_TEST(sh(same) == "(2, 3)");
  BOOST_TEST(allclose(same, {-9, 2, 3, 4, -9, 6}, 0, 0));
  BOOST_TEST(allclose(masked_fill(x, bool_tensor({true, false}, {2, 1}), 0), {0, 0, 0, 4, 5, 6}, 0, 0));
  BOOST_TEST(allclose(masked_fill(x, bool_tensor({false, true, true}, {3}), 0.5), {1, 0.5, 0.5, 4, 0.5, 0.5}, 0, 0));
  BOOST_TEST(allclose(masked_fill(x, bool_tensor({true}, {}), 7), {7, 7, 7, 7, 7, 7}, 0, 0));
  Tensor nf = masked_fill(x, bool_tensor({false, false, true}, {1, 3}), -kInf);
  BOOST_TEST(allclose(nf, {1, 2, -kInf, 4, 5, -kInf}, 0, 0));
  // float32, rank 3 with a (3,4) causal mask
  Tensor x3 = f32(vals(24, 151), {2, 3, 4});
  Tensor y3 = masked_fill(x3, causal_mask(3, 4), -1);
  BOOST_TEST(y3.dtype() == DType::Float32);
  Vec xv = x3.to_vector(), e;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) e.push_back(j > i ? -1.0 : xv[(b * 3 + i) * 4 + j]);
  BOOST_TEST(allclose(y3, e, 0, 0));
}

BOOST_AUTO_TEST_CASE(where_values) {
  Tensor c = bool_tensor({true, false, false, true, true, false}, {2, 3});
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64({-1, -2, -3}, {3});
  Tensor y = where(c, a, b);
  BOOST_TEST(sh(y) == "(2, 3)");
  BOOST_TEST(allclose(y, {1, -2, -3, 4, 5, -3}, 0, 0));
  // cond (2,1), a scalar, b (3) -> (2,3)
  Tensor y2 = where(bool_tensor({true, false}, {2, 1}), scalar(9, DType::Float64), b);
  BOOST_TEST(sh(y2) == "(2, 3)");
  BOOST_TEST(allclose(y2, {9, 9, 9, -1, -2, -3}, 0, 0));
  // cond broadcasts up: cond (2,1,3), a (3), b () -> (2,1,3)
  Tensor y3 = where(bool_tensor({true, false, true, false, true, false}, {2, 1, 3}), f32({1, 2, 3}, {3}),
                    scalar(0, DType::Float32));
  BOOST_TEST(sh(y3) == "(2, 1, 3)");
  BOOST_TEST(y3.dtype() == DType::Float32);
  BOOST_TEST(allclose(y3, {1, 0, 3, 0, 2, 0}, 0, 0));
  // a and b both broadcast against each other: a (2,1), b (1,3), cond (3)
  Tensor y4 = where(bool_tensor({true, false, true}, {3}), f64({10, 20}, {2, 1}), f64({1, 2, 3}, {1, 3}));
  BOOST_TEST(sh(y4) == "(2, 3)");
  BOOST_TEST(allclose(y4, {10, 2, 10, 20, 2, 20}, 0, 0));
}

BOOST_AUTO_TEST_CASE(causal_mask_values) {
  Tensor sq = causal_mask(3);
  BOOST_TEST(sq.dtype() == DType::Bool);
  BOOST_TEST(sh(sq) == "(3, 3)");
  BOOST_TEST(allclose(sq, {0, 1, 1, 0, 0, 1, 0, 0, 0}, 0, 0));
  BOOST_TEST(allclose(causal_mask(3, 3, CausalAlign::BottomRight), {0, 1, 1, 0, 0, 1, 0, 0, 0}, 0, 0));
  // T < S: top-left, query i sees j <= i
  Tensor tl = causal_mask(2, 4, CausalAlign::TopLeft);
  BOOST_TEST(sh(tl) == "(2, 4)");
  BOOST_TEST(allclose(tl, {0, 1, 1, 1, 0, 0, 1, 1}, 0, 0));
  BOOST_TEST(allclose(causal_mask(2, 4), {0, 1, 1, 1, 0, 0, 1, 1}, 0, 0));
  // T < S: bottom-right, query i sees j <= i + 2; the last query sees everything
  Tensor br = causal_mask(2, 4, CausalAlign::BottomRight);
  BOOST_TEST(allclose(br, {0, 0, 0, 1, 0, 0, 0, 0}, 0, 0));
  // T > S: top-left
  Tensor tl2 = causal_mask(3, 2, CausalAlign::TopLeft);
  BOOST_TEST(sh(tl2) == "(3, 2)");
  BOOST_TEST(allclose(tl2, {0, 1, 0, 0, 0, 0}, 0, 0));
  // T > S: bottom-right (shift -1): query 0 sees nothing, query 1 sees key 0
  Tensor br2 = causal_mask(3, 2, CausalAlign::BottomRight);
  BOOST_TEST(allclose(br2, {1, 1, 0, 1, 0, 0}, 0, 0));
  // Loops for a bigger case.
  const std::size_t T = 4, S = 7;
  Vec etl, ebr;
  for (std::size_t i = 0; i < T; ++i)
    for (std::size_t j = 0; j < S; ++j) {
      etl.push_back(j > i ? 1 : 0);
      ebr.push_back(j > i + (S - T) ? 1 : 0);
    }
  BOOST_TEST(allclose(causal_mask(T, S), etl, 0, 0));
  BOOST_TEST(allclose(causal_mask(T, S, CausalAlign::BottomRight), ebr, 0, 0));
}

BOOST_AUTO_TEST_CASE(logical_ops) {
  Tensor a = bool_tensor({true, true, false, false}, {2, 2});
  Tensor b = bool_tensor({true, false, true, false}, {2, 2});
  Tensor o = logical_or(a, b);
  BOOST_TEST(o.dtype() == DType::Bool);
  BOOST_TEST(sh(o) == "(2, 2)");
  BOOST_TEST(allclose(o, {1, 1, 1, 0}, 0, 0));
  BOOST_TEST(allclose(logical_and(a, b), {1, 0, 0, 0}, 0, 0));
  BOOST_TEST(logical_not(a).dtype() == DType::Bool);
  BOOST_TEST(allclose(logical_not(a), {0, 0, 1, 1}, 0, 0));
  // Broadcasting: (2,1) with (3) -> (2,3)
  Tensor r = bool_tensor({true, false}, {2, 1}), c = bool_tensor({false, true, false}, {3});
  Tensor ro = logical_or(r, c);
  BOOST_TEST(sh(ro) == "(2, 3)");
  BOOST_TEST(allclose(ro, {1, 1, 1, 0, 1, 0}, 0, 0));
  Tensor ra = logical_and(r, c);
  BOOST_TEST(sh(ra) == "(2, 3)");
  BOOST_TEST(allclose(ra, {0, 1, 0, 0, 0, 0}, 0, 0));
  // Combining a causal mask with a key padding mask (1, 3).
  Tensor pad = bool_tensor({false, false, true}, {1, 3});
  BOOST_TEST(allclose(logical_or(causal_mask(3), pad), {0, 1, 1, 0, 0, 1, 0, 0, 1}, 0, 0));
}

BOOST_AUTO_TEST_CASE(tensor_to) {
  Tensor x = f64({0.1, -2.5, 3e10, 1.0 / 3}, {2, 2});
  Tensor y = x.to(DType::Float32);
  BOOST_TEST(y.dtype() == DType::Float32);
  BOOST_TEST(sh(y) == "(2, 2)");
  BOOST_TEST(allclose(y, round32({0.1, -2.5, 3e10, 1.0 / 3}), 0, 0));
  Tensor z = y.to(DType::Float64);
  BOOST_TEST(z.dtype() == DType::Float64);
  BOOST_TEST(allclose(z, round32({0.1, -2.5, 3e10, 1.0 / 3}), 0, 0));
  Tensor same = x.to(DType::Float64);
  BOOST_TEST(same.dtype() == DType::Float64);
  BOOST_TEST(allclose(same, {0.1, -2.5, 3e10, 1.0 / 3}, 0, 0));
  BOOST_TEST(sh(scalar(1.5, DType::Float64).to(DType::Float32)) == "()");
}

// ---------------------------------------------------------------------------------------
// Hand-derived gradients
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(grad_sum_of_squares_is_2x) {
  Vec xv = {1, -2, 0.5, 3, 0, -0.25};
  Tensor x = leaf64(xv, {2, 3});
  sum(mul(x, x)).backward();
  BOOST_TEST(allclose(x.grad(), map(xv, [](double v) { return 2 * v; }), 0, 0));
  // float32, and via pow
  Tensor x32 = leaf32(xv, {6});
  sum(pow(x32, 2.0)).backward();
  BOOST_TEST(x32.grad().dtype() == DType::Float32);
  BOOST_TEST(allclose(x32.grad(), map(xv, [](double v) { return 2 * v; }), kRtol32, kAtol32));
  // a + a: both contributions
  Tensor a = leaf64({1, 2}, {2});
  sum(add(a, a)).backward();
  BOOST_TEST(allclose(a.grad(), {2, 2}, 0, 0));
}

BOOST_AUTO_TEST_CASE(grad_broadcast_binary_ops) {
  // y = a (2,3) op b (3), upstream G: db sums over rows.
  Vec av = vals(6, 161), bv = vals(3, 162, 0.5, 2), G = vals(6, 163);
  Tensor a = leaf64(av, {2, 3}), b = leaf64(bv, {3});
  auto g = grad({mul(a, b)}, {a, b}, {f64(G, {2, 3})});
  Vec da(6), db(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      da[i * 3 + j] = G[i * 3 + j] * bv[j];
      db[j] += G[i * 3 + j] * av[i * 3 + j];
    }
  BOOST_TEST(sh(g[1]) == "(3)");
  BOOST_TEST(allclose(g[0], da, 1e-14, 1e-15));
  BOOST_TEST(allclose(g[1], db, 1e-14, 1e-15));
  // div: da = G / b, db = -G a / b^2
  auto gd = grad({div(a, b)}, {a, b}, {f64(G, {2, 3})});
  Vec dda(6), ddb(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      dda[i * 3 + j] = G[i * 3 + j] / bv[j];
      ddb[j] += -G[i * 3 + j] * av[i * 3 + j] / (bv[j] * bv[j]);
    }
  BOOST_TEST(allclose(gd[0], dda, 1e-13, 1e-15));
  BOOST_TEST(allclose(gd[1], ddb, 1e-13, 1e-15));
  // sub with (2,1) - (1,3)
  Tensor c = leaf64({1, 2}, {2, 1}), d = leaf64({1, 2, 3}, {1, 3});
  auto gs = grad({sub(c, d)}, {c, d}, {f64(G, {2, 3})});
  BOOST_TEST(allclose(gs[0], {G[0] + G[1] + G[2], G[3] + G[4] + G[5]}, 1e-14, 1e-15));
  BOOST_TEST(allclose(gs[1], {-(G[0] + G[3]), -(G[1] + G[4]), -(G[2] + G[5])}, 1e-14, 1e-15));
}

BOOST_AUTO_TEST_CASE(grad_unary_functions) {
  Vec xv = {-1.5, -0.2, 0.3, 1.1};
  Vec G = {0.7, -1.3, 2.0, 0.4};
  auto check = [&](const char* name, Tensor (*f)(const Tensor&), const std::function<double(double)>& df,
                   const Vec& at) {
    BOOST_TEST_CONTEXT(name) {
      Tensor x = leaf64(at, {4});
      auto g = grad({f(x)}, {x}, {f64(G, {4})});
      Vec e(4);
      for (int i = 0; i < 4; ++i) e[i] = G[i] * df(at[i]);
      BOOST_TEST(allclose(g[0], e, 1e-12, 1e-14));
    }
  };
  Vec pos = {0.25, 0.5, 2.0, 9.0};
  check("exp", xgrad::exp, [](double v) { return std::exp(v); }, xv);
  check("log", xgrad::log, [](double v) { return 1 / v; }, pos);
  check("sqrt", xgrad::sqrt, [](double v) { return 0.5 / std::sqrt(v); }, pos);
  check("rsqrt", xgrad::rsqrt, [](double v) { return -0.5 * std::pow(v, -1.5); }, pos);
  check("tanh", xgrad::tanh, [](double v) { return 1 - std::tanh(v) * std::tanh(v); }, xv);
  check("sigmoid", xgrad::sigmoid, [](double v) { return ref_sigmoid(v) * (1 - ref_sigmoid(v)); }, xv);
  check("relu", xgrad::relu, [](double v) { return v > 0 ? 1.0 : 0.0; }, xv);
  check("erf", xgrad::erf, [](double v) { return 2 / std::sqrt(kPi) * std::exp(-v * v); }, xv);
  check("gelu", xgrad::gelu,
        [](double v) {
          return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-v * v / 2) / std::sqrt(2 * kPi);
        },
        xv);
  check("neg", xgrad::neg, [](double) { return -1.0; }, xv);
  // relu at exactly 0: gradient 0 (as PyTorch)
  Tensor z = leaf64({0, 0}, {2});
  sum(relu(z)).backward();
  BOOST_TEST(allclose(z.grad(), {0, 0}, 0, 0));
  // pow: p x^(p-1); scalar ops
  Tensor x = leaf64(pos, {4});
  auto gp = grad({pow(x, 2.5)}, {x}, {f64(G, {4})});
  Vec ep(4);
  for (int i = 0; i < 4; ++i) ep[i] = G[i] * 2.5 * std::pow(pos[i], 1.5);
  BOOST_TEST(allclose(gp[0], ep, 1e-12, 1e-14));
  auto gm = grad({mul_scalar(add_scalar(x, 3), -2)}, {x}, {f64(G, {4})});
  BOOST_TEST(allclose(gm[0], map(G, [](double v) { return -2 * v; }), 0, 0));
}

BOOST_AUTO_TEST_CASE(grad_softmax_hand_formula) {
  // dx = y * (g - sum(g * y)) per row, with a non-trivial upstream g (sum() would hide bugs).
  Vec xv = {0.2, -1.0, 1.5, 0.3, 2.0, -0.5, 0.0, 1.0};
  Vec G = {1.0, -0.5, 0.25, 2.0, -1.5, 0.75, 0.3, -0.2};
  Tensor x = leaf64(xv, {2, 4});
  auto g = grad({softmax(x)}, {x}, {f64(G, {2, 4})});
  Vec y = ref_softmax(xv, 2, 4), e(8);
  for (int r = 0; r < 2; ++r) {
    double dot = 0;
    for (int i = 0; i < 4; ++i) dot += G[r * 4 + i] * y[r * 4 + i];
    for (int i = 0; i < 4; ++i) e[r * 4 + i] = y[r * 4 + i] * (G[r * 4 + i] - dot);
  }
  BOOST_TEST(allclose(g[0], e, 1e-12, 1e-15));
  // Known tiny case: softmax([0, 0]) = [.5, .5], g = [1, 0] -> dx = [.25, -.25]
  Tensor t = leaf64({0, 0}, {2});
  auto gt = grad({softmax(t)}, {t}, {f64({1, 0}, {2})});
  BOOST_TEST(allclose(gt[0], {0.25, -0.25}, 1e-15));
  // log_softmax: dx = g - softmax * sum(g)
  auto gl = grad({log_softmax(x)}, {x}, {f64(G, {2, 4})});
  Vec el(8);
  for (int r = 0; r < 2; ++r) {
    double s = 0;
    for (int i = 0; i < 4; ++i) s += G[r * 4 + i];
    for (int i = 0; i < 4; ++i) el[r * 4 + i] = G[r * 4 + i] - y[r * 4 + i] * s;
  }
  BOOST_TEST(allclose(gl[0], el, 1e-12, 1e-15));
  // float32
  Tensor x32 = leaf32(xv, {2, 4});
  auto g32 = grad({softmax(x32)}, {x32}, {f32(G, {2, 4})});
  BOOST_TEST(g32[0].dtype() == DType::Float32);
  BOOST_TEST(allclose(g32[0], e, 1e-5, 1e-6));
}

BOOST_AUTO_TEST_CASE(grad_masked_softmax_and_masked_fill) {
  std::vector<bool> m = {false, true, false, true, true, true, true, true};  // row 1 fully masked
  Vec xv = {0.2, -1.0, 1.5, 0.3, 2.0, -0.5, 0.0, 1.0};
  Vec G = {1.0, -0.5, 0.25, 2.0, -1.5, 0.75, 0.3, -0.2};
  Tensor x = leaf64(xv, {2, 4});
  auto g = grad({masked_softmax(x, bool_tensor(m, {2, 4}))}, {x}, {f64(G, {2, 4})});
  Vec y = ref_softmax(xv, 2, 4, m), e(8, 0.0);
  for (int r = 0; r < 2; ++r) {
    double dot = 0;
    for (int i = 0; i < 4; ++i) dot += G[r * 4 + i] * y[r * 4 + i];
    for (int i = 0; i < 4; ++i) e[r * 4 + i] = y[r * 4 + i] * (G[r * 4 + i] - dot);
  }
  BOOST_TEST(test::all_finite(g[0]));
  BOOST_TEST(allclose(g[0], e, 1e-12, 1e-15));
  // masked_fill: gradient zero where filled
  Tensor x2 = leaf64(xv, {2, 4});
  auto gf = grad({masked_fill(x2, bool_tensor({true, false, false, true}, {4}), -1e9)}, {x2}, {f64(G, {2, 4})});
  BOOST_TEST(allclose(gf[0], {0, -0.5, 0.25, 0, 0, 0.75, 0.3, 0}, 0, 0));
}

BOOST_AUTO_TEST_CASE(grad_matmul_2d_every_flag) {
  // Logical C = A B, A (n,k), B (k,m): dA = G B^T, dB = A^T G (loops), then stored
  // transposed when the operand was passed transposed.
  const std::size_t n = 3, k = 4, m = 2;
  Vec A = vals(n * k, 171), B = vals(k * m, 172), G = vals(n * m, 173);
  Vec dA(n * k, 0.0), dB(k * m, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t q = 0; q < k; ++q)
      for (std::size_t j = 0; j < m; ++j) {
        dA[i * k + q] += G[i * m + j] * B[q * m + j];
        dB[q * m + j] += A[i * k + q] * G[i * m + j];
      }
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      BOOST_TEST_CONTEXT("ta " << ta << " tb " << tb) {
        Tensor a = ta ? leaf64(tr(A, n, k), {k, n}) : leaf64(A, {n, k});
        Tensor b = tb ? leaf64(tr(B, k, m), {m, k}) : leaf64(B, {k, m});
        auto g = grad({matmul(a, b, ta, tb)}, {a, b}, {f64(G, {n, m})});
        BOOST_TEST(allclose(g[0], ta ? tr(dA, n, k) : dA, 1e-12, 1e-14));
        BOOST_TEST(allclose(g[1], tb ? tr(dB, k, m) : dB, 1e-12, 1e-14));
      }
    }
}

BOOST_AUTO_TEST_CASE(grad_matmul_broadcast_batch) {
  // a (2,3,4) x shared b (4,2): dB = sum over batch of A_b^T G_b
  Vec A = vals(24, 181), B = vals(8, 182), G = vals(12, 183);
  Tensor a = leaf64(A, {2, 3, 4}), b = leaf64(B, {4, 2});
  auto g = grad({matmul(a, b)}, {a, b}, {f64(G, {2, 3, 2})});
  Vec dA(24, 0.0), dB(8, 0.0);
  for (int bi = 0; bi < 2; ++bi)
    for (int i = 0; i < 3; ++i)
      for (int q = 0; q < 4; ++q)
        for (int j = 0; j < 2; ++j) {
          dA[(bi * 3 + i) * 4 + q] += G[(bi * 3 + i) * 2 + j] * B[q * 2 + j];
          dB[q * 2 + j] += A[(bi * 3 + i) * 4 + q] * G[(bi * 3 + i) * 2 + j];
        }
  BOOST_TEST(sh(g[1]) == "(4, 2)");
  BOOST_TEST(allclose(g[0], dA, 1e-12, 1e-14));
  BOOST_TEST(allclose(g[1], dB, 1e-12, 1e-14));
  // shared a (3,4) x b (2,4,2): dA = sum over batch of G_b B_b^T
  Vec A2 = vals(12, 184), B2 = vals(16, 185);
  Tensor a2 = leaf64(A2, {3, 4}), b2 = leaf64(B2, {2, 4, 2});
  auto g2 = grad({matmul(a2, b2)}, {a2, b2}, {f64(G, {2, 3, 2})});
  Vec dA2(12, 0.0), dB2(16, 0.0);
  for (int bi = 0; bi < 2; ++bi)
    for (int i = 0; i < 3; ++i)
      for (int q = 0; q < 4; ++q)
        for (int j = 0; j < 2; ++j) {
          dA2[i * 4 + q] += G[(bi * 3 + i) * 2 + j] * B2[(bi * 4 + q) * 2 + j];
          dB2[(bi * 4 + q) * 2 + j] += A2[i * 4 + q] * G[(bi * 3 + i) * 2 + j];
        }
  BOOST_TEST(sh(g2[0]) == "(3, 4)");
  BOOST_TEST(allclose(g2[0], dA2, 1e-12, 1e-14));
  BOOST_TEST(allclose(g2[1], dB2, 1e-12, 1e-14));
  // vector x matrix: (3) x (3,2): da = B g, db = a g^T
  Tensor v = leaf64({1, 2, 3}, {3}), M = leaf64({1, 2, 3, 4, 5, 6}, {3, 2});
  auto gv = grad({matmul(v, M)}, {v, M}, {f64({1, -1}, {2})});
  BOOST_TEST(allclose(gv[0], {-1, -1, -1}, 0, 0));
  BOOST_TEST(allclose(gv[1], {1, -1, 2, -2, 3, -3}, 0, 0));
}

BOOST_AUTO_TEST_CASE(grad_matmul_empty_inner_dim) {
  // (2,3,0) x (0,2): the product is zero; both gradients are empty.
  Tensor a = leaf64({}, {2, 3, 0}), b = leaf64({}, {0, 2});
  auto g = grad({matmul(a, b)}, {a, b}, {f64(vals(12, 1), {2, 3, 2})});
  BOOST_TEST(sh(g[0]) == "(2, 3, 0)");
  BOOST_TEST(sh(g[1]) == "(0, 2)");
}

BOOST_AUTO_TEST_CASE(grad_linear) {
  // y = x W^T + b: dx = G W, dW = G^T x (over all rows), db = column sums of G
  const std::size_t in = 3, out = 2, rows = 4;
  Vec X = vals(rows * in, 191), W = vals(out * in, 192), bv = vals(out, 193), G = vals(rows * out, 194);
  Tensor x = leaf64(X, {2, 2, in}), w = leaf64(W, {out, in}), b = leaf64(bv, {out});
  auto g = grad({linear(x, w, b)}, {x, w, b}, {f64(G, {2, 2, out})});
  Vec dx(rows * in, 0.0), dW(out * in, 0.0), db(out, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      db[o] += G[r * out + o];
      for (std::size_t i = 0; i < in; ++i) {
        dx[r * in + i] += G[r * out + o] * W[o * in + i];
        dW[o * in + i] += G[r * out + o] * X[r * in + i];
      }
    }
  BOOST_TEST(sh(g[0]) == "(2, 2, 3)");
  BOOST_TEST(allclose(g[0], dx, 1e-12, 1e-14));
  BOOST_TEST(allclose(g[1], dW, 1e-12, 1e-14));
  BOOST_TEST(allclose(g[2], db, 1e-12, 1e-14));
}

BOOST_AUTO_TEST_CASE(grad_max_ties_split_equally) {
  // Row 0: max 3 twice -> 1/2 each; row 1: all equal -> 1/3 each; row 2: unique.
  Tensor x = leaf64({1, 3, 3, 2, 2, 2, 5, -1, 0}, {3, 3});
  auto g = grad({xgrad::max(x, 1)}, {x}, {f64({1, 3, -2}, {3})});
  BOOST_TEST(allclose(g[0], {0, 0.5, 0.5, 1, 1, 1, -2, 0, 0}, 1e-15));
  // keepdim, axis 0: columns [1,2,5] -> row 2; [3,2,-1] -> row 0; [3,2,0] -> row 0
  auto g0 = grad({xgrad::max(x, 0, true)}, {x}, {f64({1, 1, 1}, {1, 3})});
  BOOST_TEST(allclose(g0[0], {0, 1, 1, 0, 0, 0, 1, 0, 0}, 0, 0));
  // float32 with a tie
  Tensor x32 = leaf32({4, 4, 1, 4}, {4});
  sum(xgrad::max(x32, 0)).backward();
  BOOST_TEST(allclose(x32.grad(), {1.0 / 3, 1.0 / 3, 0, 1.0 / 3}, 1e-6));
}

BOOST_AUTO_TEST_CASE(grad_amax_ties_split_equally) {
  // As torch.amax: the gradient is shared equally among all elements equal to the max
  // over the reduced axes (here three 3s -> 1/3 each).
  Tensor x = leaf64({3, 3, 3, 1}, {2, 2});
  auto g = grad({amax(x, {0, 1})}, {x});
  BOOST_TEST(allclose(g[0], {1.0 / 3, 1.0 / 3, 1.0 / 3, 0}, 1e-15));
  // No ties: the single maximum gets everything.
  Tensor y = leaf64({1, 7, 3, 2, 0, 5}, {2, 3});
  auto gy = grad({amax(y, {})}, {y});
  BOOST_TEST(allclose(gy[0], {0, 1, 0, 0, 0, 0}, 0, 0));
}

// A NaN anywhere in the reduced elements makes the max NaN (as torch.max / torch.amax; it used
// to be dropped unless it came first), and the gradient goes to the NaNs, split equally.
BOOST_AUTO_TEST_CASE(max_amax_and_relu_pass_nan_on) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = tensor({1, nan, 2, nan, 3, 0, 5, 4, 6}, {3, 3}, dt);
    x.set_requires_grad(true);
    const std::vector<double> y = xgrad::max(x, 1).to_vector();
    BOOST_TEST(std::isnan(y[0]));
    BOOST_TEST(std::isnan(y[1]));
    BOOST_TEST(y[2] == 6.0);
    sum(xgrad::max(x, 1)).backward();
    BOOST_TEST(allclose(x.grad(), {0, 1, 0, 1, 0, 0, 0, 0, 1}, 0, 0));
    BOOST_TEST(std::isnan(amax(x, {}).item()));
    BOOST_TEST(std::isnan(amax(tensor({nan, 1, nan, 2}, {4}, dt), {0}).item()));
    Tensor r = tensor({nan, -1, 2}, {3}, dt);
    r.set_requires_grad(true);
    const std::vector<double> ry = relu(r).to_vector();
    BOOST_TEST(std::isnan(ry[0]));
    BOOST_TEST((ry[1] == 0.0 && ry[2] == 2.0));
    sum(relu(r)).backward();
    BOOST_TEST(allclose(r.grad(), {1, 0, 1}, 0, 0));  // torch's threshold_backward: NaN > 0 passes
  }
}

// A rank-0 x is one row of one element along axis 0 or -1, as in PyTorch (they used to be
// IndexErrors while argmax, cumsum and logsumexp took scalars).
BOOST_AUTO_TEST_CASE(scalars_are_one_element_rows) {
  Tensor x = leaf64({2.5}, {});
  BOOST_TEST(xgrad::max(x, 0).item() == 2.5);
  BOOST_TEST(xgrad::max(x, -1, true).shape() == Shape{});
  BOOST_TEST(softmax(x).item() == 1.0);
  BOOST_TEST(log_softmax(x, 0).item() == 0.0);
  BOOST_TEST(masked_softmax(x, bool_tensor({false}, {})).item() == 1.0);
  BOOST_TEST(masked_softmax(x, bool_tensor({true}, {})).item() == 0.0);
  BOOST_TEST(grad({xgrad::max(x, 0)}, {x})[0].item() == 1.0);
  BOOST_TEST(grad({softmax(x)}, {x})[0].item() == 0.0);
  for (const char* op : {"max", "softmax", "log_softmax"})
    test::expect_throws([&] {
      if (std::string(op) == "max") xgrad::max(x, 1);
      else if (std::string(op) == "softmax") softmax(x, 1);
      else log_softmax(x, -2);
    }, "IndexError", {op, "'x'", "()"});
}

// Float32 sums run in float64 and round once: 2^22 x 0.1f used to be off by 2.5e-3 relative
// (a mean), 4.1e-3 (column sums), and log_softmax over 2^20 classes by 6.5e-4.
BOOST_AUTO_TEST_CASE(long_float32_sums_round_once) {
  const std::size_t n = std::size_t(1) << 22;
  const double tenth = double(0.1f);
  const Tensor x = full({n}, 0.1, DType::Float32);
  BOOST_TEST(std::abs(mean(x).item() / tenth - 1) < 1e-7);
  BOOST_TEST(std::abs(sum(x).item() / (tenth * double(n)) - 1) < 1e-7);
  const std::vector<double> cols = sum(reshape(x, {long(n / 8), 8}), {0}).to_vector();
  for (double c : cols) BOOST_TEST(std::abs(c / (tenth * double(n / 8)) - 1) < 1e-7);
  const std::size_t classes = std::size_t(1) << 20;
  const Tensor logits = zeros({classes}, DType::Float32);
  const double log_p = -std::log(double(classes));
  BOOST_TEST(std::abs(log_softmax(logits).to_vector()[12345] / log_p - 1) < 1e-7);
  BOOST_TEST(std::abs(logsumexp(logits, {0}).item() / -log_p - 1) < 1e-7);
  BOOST_TEST(std::abs(softmax(logits).to_vector()[777] * double(classes) - 1) < 1e-6);
  const Tensor targets = index_tensor({3}, {});
  BOOST_TEST(std::abs(softmax_cross_entropy(reshape(logits, {1, long(classes)}), reshape(targets, {1}), -100, 0.5).item() /
                      -log_p - 1) < 1e-6);
}

BOOST_AUTO_TEST_CASE(grad_reductions_and_shape_ops) {
  Vec G6 = {1, 2, 3, 4, 5, 6};
  // sum over axis 1 keepdim: gradient broadcast back
  Tensor x = leaf64(vals(6, 201), {2, 3});
  auto gs = grad({sum(x, {1}, true)}, {x}, {f64({10, 20}, {2, 1})});
  BOOST_TEST(allclose(gs[0], {10, 10, 10, 20, 20, 20}, 0, 0));
  // mean over axis 0: g / 2
  auto gm = grad({mean(x, {0})}, {x}, {f64({2, 4, 6}, {3})});
  BOOST_TEST(allclose(gm[0], {1, 2, 3, 1, 2, 3}, 0, 0));
  // broadcast_to (3,1)->(2,3,2): gradient sums
  Tensor b = leaf64({1, 2, 3}, {3, 1});
  auto gb = grad({broadcast_to(b, {2, 3, 2})}, {b}, {f64(Vec(12, 1.0), {2, 3, 2})});
  BOOST_TEST(allclose(gb[0], {4, 4, 4}, 0, 0));
  // sum_to (2,3)->(3): gradient broadcasts
  auto gt = grad({sum_to(x, {3})}, {x}, {f64({1, 2, 3}, {3})});
  BOOST_TEST(allclose(gt[0], {1, 2, 3, 1, 2, 3}, 0, 0));
  // transpose routes the gradient back transposed
  auto gtr = grad({transpose(x, 0, 1)}, {x}, {f64(G6, {3, 2})});
  BOOST_TEST(allclose(gtr[0], {1, 3, 5, 2, 4, 6}, 0, 0));
  // narrow: gradient is zero outside the window
  auto gn = grad({narrow(x, 1, 1, 2)}, {x}, {f64({1, 2, 3, 4}, {2, 2})});
  BOOST_TEST(allclose(gn[0], {0, 1, 2, 0, 3, 4}, 0, 0));
  // concat routes each slice back to its input
  Tensor p = leaf64({1, 2}, {2, 1}), q = leaf64({3, 4, 5, 6}, {2, 2});
  auto gc = grad({concat({p, q}, 1)}, {p, q}, {f64(G6, {2, 3})});
  BOOST_TEST(allclose(gc[0], {1, 4}, 0, 0));
  BOOST_TEST(allclose(gc[1], {2, 3, 5, 6}, 0, 0));
  // split pieces used with different weights
  auto parts = split(x, {1, 2}, 1);
  auto gsp = grad({add(sum(parts[0]), mul_scalar(sum(parts[1]), 3))}, {x});
  BOOST_TEST(allclose(gsp[0], {1, 3, 3, 1, 3, 3}, 0, 0));
  // reshape / permute
  Tensor z = leaf64(vals(24, 202), {2, 3, 4});
  Vec Gz(24);
  for (int i = 0; i < 24; ++i) Gz[i] = i;
  auto gp = grad({permute(z, {2, 0, 1})}, {z}, {f64(Gz, {4, 2, 3})});
  // dz[i][j][k] = G[k][i][j]
  Vec ep(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) ep[(i * 3 + j) * 4 + k] = Gz[(k * 2 + i) * 3 + j];
  BOOST_TEST(allclose(gp[0], ep, 0, 0));
  auto gr = grad({reshape(z, {6, 4})}, {z}, {f64(Gz, {6, 4})});
  BOOST_TEST(allclose(gr[0], Gz, 0, 0));
}

BOOST_AUTO_TEST_CASE(grad_where_and_to) {
  Tensor c = bool_tensor({true, false, false, true, true, false}, {2, 3});
  Tensor a = leaf64({1, 2, 3, 4, 5, 6}, {2, 3}), b = leaf64({-1, -2, -3}, {3});
  auto g = grad({where(c, a, b)}, {a, b}, {f64({1, 2, 3, 4, 5, 6}, {2, 3})});
  BOOST_TEST(allclose(g[0], {1, 0, 0, 4, 5, 0}, 0, 0));
  BOOST_TEST(allclose(g[1], {0, 2, 3 + 6}, 0, 0));
  // to(): the gradient comes back in the input's dtype
  Tensor x = leaf64({0.5, 1.5}, {2});
  Tensor y = x.to(DType::Float32);
  BOOST_TEST(y.requires_grad());
  auto gx = grad({sum(mul(y, y))}, {x});
  BOOST_TEST(gx[0].dtype() == DType::Float64);
  BOOST_TEST(allclose(gx[0], {1, 3}, 0, 0));
}

BOOST_AUTO_TEST_SUITE_END()
