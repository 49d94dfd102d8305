// Selection, indexing and sampling ops: comparisons, abs / clamp / maximum / minimum, argmax,
// topk, gather / scatter_add / index_select / index_add, logsumexp, cumsum, arange, randint,
// multinomial, sample_categorical and patchify.
//
// Forward values are checked against independently derived values: hand-computed small cases,
// plain loops over std:: (never other xgrad ops), and PyTorch 1.13 fixtures written by
// tools/make_select_fixtures.py (tests/fixtures/select/, float64). Gradients and second
// derivatives of the differentiable ops are checked by the registry (tests/test_registry.cpp);
// here their gradients are compared with PyTorch's where PyTorch has a rule to match (ties,
// bounds, NaN positions), and the edge cases the registry cannot sample (-inf / +inf rows).
// Error cases: type and message here; most are also in tests/test_bad_inputs.cpp's table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "golden.hpp"
#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/compare.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/random.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::allclose;
using test::f32;
using test::f64;

namespace {

using Vec = std::vector<double>;
using IVec = std::vector<std::int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::string kSelectFixtures = std::string(XGRAD_FIXTURE_DIR) + "/select";

IVec ints_of(const Tensor& t) {
  BOOST_TEST_REQUIRE((t.dtype() == DType::Int64));
  const std::int64_t* p = t.data<std::int64_t>();
  return IVec(p, p + t.numel());
}
std::vector<bool> bools_of(const Tensor& t) {
  BOOST_TEST_REQUIRE((t.dtype() == DType::Bool));
  const bool* p = t.data<bool>();
  return std::vector<bool>(p, p + t.numel());
}

// Runs f and checks it throws E with every part in its message.
template <class E, class F> void check_throws(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    BOOST_ERROR("did not throw");
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "\"" << msg << "\" lacks \"" << p << "\"");
  } catch (const std::exception& e) {
    BOOST_ERROR("wrong exception " << test::error_kind(e) << ": " << e.what());
  }
}

// Gradient of sum(y * upstream) with respect to each of xs.
std::vector<Tensor> grads_of(const Tensor& y, const Tensor& upstream, const std::vector<Tensor>& xs) {
  return grad({sum(mul(y, upstream))}, xs);
}

// Exact equality of values, NaN equal to NaN.
boost::test_tools::predicate_result same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    boost::test_tools::predicate_result r(false);
    r.message() << "shapes " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
    return r;
  }
  const Vec va = a.to_vector(), vb = b.to_vector();
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) {
      boost::test_tools::predicate_result r(false);
      r.message() << "flat index " << i << ": " << va[i] << " vs " << vb[i];
      return r;
    }
  return true;
}

// Row-major multi-index helpers for the plain-loop references.
std::vector<std::size_t> unravel(std::size_t flat, const Shape& s) {
  std::vector<std::size_t> idx(s.size());
  for (std::size_t d = s.size(); d-- > 0;) idx[d] = flat % s[d], flat /= s[d];
  return idx;
}
std::size_t ravel(const std::vector<std::size_t>& idx, const Shape& s) {
  std::size_t f = 0;
  for (std::size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(select_ops)

// ===== comparisons ==============================================================================

BOOST_AUTO_TEST_CASE(comparisons_broadcast_in_every_dtype) {
  // a (2, 3) against b (3), every op, against the plain loop a[i][j] OP b[j].
  const Vec av = {1, -2, 3, 0, 5, -2}, bv = {1, 0, -2};
  const Vec bool_a = {1, 0, 1, 0, 0, 1}, bool_b = {1, 0, 0};
  for (DType dt : {DType::Float32, DType::Float64, DType::Int64, DType::Bool}) {
    const bool is_bool = dt == DType::Bool;
    const Vec& va = is_bool ? bool_a : av;
    const Vec& vb = is_bool ? bool_b : bv;
    Tensor a = tensor(va, {2, 3}, dt), b = tensor(vb, {3}, dt);
    struct Op {
      const char* name;
      Tensor (*f)(const Tensor&, const Tensor&);
      bool (*ref)(double, double);
    };
    const Op ops[] = {{"eq", eq, [](double x, double y) { return x == y; }},
                      {"ne", ne, [](double x, double y) { return x != y; }},
                      {"lt", lt, [](double x, double y) { return x < y; }},
                      {"le", le, [](double x, double y) { return x <= y; }},
                      {"gt", gt, [](double x, double y) { return x > y; }},
                      {"ge", ge, [](double x, double y) { return x >= y; }}};
    for (const Op& op : ops) {
      BOOST_TEST_CONTEXT(op.name << " " << dtype_name(dt)) {
        std::vector<bool> expect;
        for (std::size_t i = 0; i < 2; ++i)
          for (std::size_t j = 0; j < 3; ++j) expect.push_back(op.ref(va[i * 3 + j], vb[j]));
        Tensor y = op.f(a, b);
        BOOST_TEST(shape_str(y.shape()) == "(2, 3)");
        BOOST_TEST(bools_of(y) == expect, boost::test_tools::per_element());
        // b (3) against a (2, 3): broadcast on the left operand too.
        Tensor z = op.f(b, a);
        std::vector<bool> expect_z;
        for (std::size_t i = 0; i < 2; ++i)
          for (std::size_t j = 0; j < 3; ++j) expect_z.push_back(op.ref(vb[j], va[i * 3 + j]));
        BOOST_TEST(bools_of(z) == expect_z, boost::test_tools::per_element());
      }
    }
  }
  // (3, 1) against (1, 4): both broadcast.
  Tensor c = f64({0, 1, 2}, {3, 1}), d = f64({2, 0, 1, 3}, {1, 4});
  std::vector<bool> expect;
  for (int i = 0; i < 3; ++i)
    for (double v : {2, 0, 1, 3}) expect.push_back(i < v);
  BOOST_TEST(bools_of(lt(c, d)) == expect, boost::test_tools::per_element());
  // Empty and rank 0.
  BOOST_TEST(shape_str(eq(f64({}, {0, 3}), f64({1, 2, 3}, {3})).shape()) == "(0, 3)");
  BOOST_TEST(bools_of(ge(scalar(2, DType::Float64), f64({1, 2, 3}, {3}))) == (std::vector<bool>{true, true, false}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(comparisons_with_nan_follow_ieee) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor a = tensor({kNaN, 1, kNaN}, {3}, dt), b = tensor({kNaN, kNaN, 1}, {3}, dt);
    BOOST_TEST(bools_of(eq(a, b)) == (std::vector<bool>{false, false, false}), boost::test_tools::per_element());
    BOOST_TEST(bools_of(ne(a, b)) == (std::vector<bool>{true, true, true}), boost::test_tools::per_element());
    using CmpFn = Tensor (*)(const Tensor&, const Tensor&);
    for (CmpFn f : std::initializer_list<CmpFn>{lt, le, gt, ge})
      BOOST_TEST(bools_of(f(a, b)) == (std::vector<bool>{false, false, false}), boost::test_tools::per_element());
    BOOST_TEST(bools_of(ne(a, kNaN)) == (std::vector<bool>{true, true, true}), boost::test_tools::per_element());
    BOOST_TEST(bools_of(le(a, kNaN)) == (std::vector<bool>{false, false, false}), boost::test_tools::per_element());
  }
  // An int64 tensor against a NaN scalar: unordered too.
  Tensor i = index_tensor({0, 1}, {2});
  BOOST_TEST(bools_of(eq(i, kNaN)) == (std::vector<bool>{false, false}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(ne(i, kNaN)) == (std::vector<bool>{true, true}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(ge(i, kNaN)) == (std::vector<bool>{false, false}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(comparisons_with_a_scalar) {
  // Float tensors: the scalar rounded to the tensor's dtype (PyTorch: float32(0.1) == 0.1).
  BOOST_TEST(bools_of(eq(f32({0.1, 0.2}, {2}), 0.1)) == (std::vector<bool>{true, false}),
             boost::test_tools::per_element());
  BOOST_TEST(bools_of(eq(f64({0.1, double(float(0.1))}, {2}), 0.1)) == (std::vector<bool>{true, false}),
             boost::test_tools::per_element());
  BOOST_TEST(bools_of(lt(f64({-1, 0, 1}, {3}), 0.0)) == (std::vector<bool>{true, false, false}),
             boost::test_tools::per_element());
  // Int64 against a fractional or huge scalar: exact (PyTorch rounds both to float32).
  Tensor i = index_tensor({2, 3, 16777217, std::numeric_limits<std::int64_t>::max()}, {4});
  BOOST_TEST(bools_of(lt(i, 2.5)) == (std::vector<bool>{true, false, false, false}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(le(i, 2.5)) == (std::vector<bool>{true, false, false, false}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(gt(i, 2.5)) == (std::vector<bool>{false, true, true, true}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(eq(i, 3.0)) == (std::vector<bool>{false, true, false, false}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(eq(i, 16777216.0)) == (std::vector<bool>{false, false, false, false}),
             boost::test_tools::per_element());
  BOOST_TEST(bools_of(ge(i, 16777217.0)) == (std::vector<bool>{false, false, true, true}),
             boost::test_tools::per_element());
  // 2^63 is above every int64, -2^63 is the smallest one.
  BOOST_TEST(bools_of(lt(i, 9223372036854775808.0)) == (std::vector<bool>{true, true, true, true}),
             boost::test_tools::per_element());
  Tensor lo = index_tensor({std::numeric_limits<std::int64_t>::min(), 0}, {2});
  BOOST_TEST(bools_of(eq(lo, -9223372036854775808.0)) == (std::vector<bool>{true, false}),
             boost::test_tools::per_element());
  BOOST_TEST(bools_of(gt(lo, -1e300)) == (std::vector<bool>{true, true}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(lt(lo, -0.5)) == (std::vector<bool>{true, false}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(ge(lo, -0.5)) == (std::vector<bool>{false, true}), boost::test_tools::per_element());
  // Bool as 0 / 1.
  Tensor b = bool_tensor({true, false}, {2});
  BOOST_TEST(bools_of(lt(b, 0.5)) == (std::vector<bool>{false, true}), boost::test_tools::per_element());
  BOOST_TEST(bools_of(eq(b, 1.0)) == (std::vector<bool>{true, false}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(comparisons_are_never_recorded) {
  Tensor x = test::leaf({1, 2, 3}, {3}), y = test::leaf({3, 2, 1}, {3});
  for (Tensor m : {lt(x, y), eq(x, 2.0), ge(mul(x, x), y)}) {
    BOOST_TEST((m.dtype() == DType::Bool));
    BOOST_TEST(!m.requires_grad());
    BOOST_TEST(m.is_leaf());
  }
}

BOOST_AUTO_TEST_CASE(comparison_errors) {
  check_throws<DTypeError>([] { lt(f32({1}, {1}), f64({1}, {1})); }, {"lt", "'a'", "float32", "'b'", "float64"});
  check_throws<DTypeError>([] { eq(index_tensor({1}, {1}), f64({1}, {1})); }, {"eq", "int64", "float64"});
  check_throws<ShapeError>([] { ge(f64({1, 2}, {2}), f64({1, 2, 3}, {3})); }, {"ge", "'a'", "(2)", "'b'", "(3)"});
  check_throws<ValueError>([] { ne(Tensor(), f64({1}, {1})); }, {"ne", "'a'", "undefined"});
  check_throws<ValueError>([] { gt(Tensor(), 1.0); }, {"gt", "'a'", "undefined"});
}

// ===== abs, clamp, maximum, minimum (PyTorch's gradient rules) =================================

BOOST_AUTO_TEST_CASE(abs_and_clamp_match_pytorch_at_bounds_zero_and_nan) {
  test::Golden g("clamp", kSelectFixtures);
  const Tensor x = g.leaf("x");  // -1, -0.5, -0.2, 0, 0.5, 0.8, 1, NaN, 2
  struct Case {
    const char* name;
    Tensor y;
  };
  const Case cases[] = {{"both", clamp(x, -0.5, 0.8)},
                        {"min", clamp_min(x, 0.0)},
                        {"max", clamp(x, std::nullopt, 0.5)},
                        {"reversed", clamp(x, 0.8, -0.5)},  // min > max: max everywhere
                        {"abs", abs(x)}};
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      BOOST_TEST(same_values(c.y, g.at(c.name)));
      const auto gs = grads_of(c.y, g.at(std::string("upstream.") + c.name), {x});
      BOOST_TEST(test::all_finite(gs[0]));
      BOOST_TEST(same_values(gs[0], g.at(std::string("grad.") + c.name + ".x")));
    }
  }
  g.check_all_used();
  // float32: the bounds are rounded to float32 (0.1f stays 0.1f, not the double 0.1).
  Tensor y = clamp(f32({0.05, 0.1, 0.2}, {3}), 0.1, std::nullopt);
  BOOST_TEST(y.to_vector() == (Vec{double(0.1f), double(0.1f), double(0.2f)}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(clamp_errors) {
  check_throws<ValueError>([] { clamp(f64({1}, {1}), std::nullopt, std::nullopt); }, {"clamp", "'min'", "'max'"});
  check_throws<ValueError>([] { clamp(f64({1}, {1}), kNaN, 1.0); }, {"clamp", "'min'", "NaN"});
  check_throws<ValueError>([] { clamp_max(f64({1}, {1}), kNaN); }, {"clamp", "'max'", "NaN"});
  check_throws<DTypeError>([] { clamp(index_tensor({1}, {1}), 0.0, 1.0); }, {"clamp", "'x'", "int64"});
  check_throws<DTypeError>([] { abs(bool_tensor({true}, {1})); }, {"abs", "'x'", "bool"});
}

BOOST_AUTO_TEST_CASE(maximum_minimum_match_pytorch_ties_and_nan) {
  test::Golden g("extremum", kSelectFixtures);
  const Tensor a = g.leaf("a"), b = g.leaf("b");  // (2, 3) and (3): ties, a NaN on each side
  for (const char* name : {"maximum", "minimum"}) {
    BOOST_TEST_CONTEXT(name) {
      const bool is_max = std::string(name) == "maximum";
      Tensor y = is_max ? maximum(a, b) : minimum(a, b);
      BOOST_TEST(same_values(y, g.at(name)));
      const auto gs = grads_of(y, g.at(std::string("upstream.") + name), {a, b});
      BOOST_TEST(same_values(gs[0], g.at(std::string("grad.") + name + ".a")));
      BOOST_TEST(same_values(gs[1], g.at(std::string("grad.") + name + ".b")));
    }
  }
  g.check_all_used();
  // The tie rule by hand: maximum(2, 2) sends g / 2 to each side.
  Tensor p = test::leaf({2, 1}, {2}), q = test::leaf({2, 3}, {2});
  const auto gs = grad({sum(maximum(p, q))}, {p, q});
  BOOST_TEST(gs[0].to_vector() == (Vec{0.5, 0}), boost::test_tools::per_element());
  BOOST_TEST(gs[1].to_vector() == (Vec{0.5, 1}), boost::test_tools::per_element());
  check_throws<DTypeError>([] { maximum(f32({1}, {1}), f64({1}, {1})); }, {"maximum", "float32", "float64"});
  check_throws<ShapeError>([] { minimum(f64({1, 2}, {2}), f64({1, 2, 3}, {3})); }, {"minimum", "(2)", "(3)"});
}

// ===== argmax / argmin =========================================================================

BOOST_AUTO_TEST_CASE(argmax_first_of_ties_and_nan_counts_as_max) {
  // Rank 1 (xtensor 0.24's argmax(axis) is wrong there: this one is a plain loop).
  BOOST_TEST(ints_of(argmax(f64({1, 3, 3, 2}, {4}), 0)) == (IVec{1}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(argmin(f64({2, 0, 5, 0}, {4}), -1)) == (IVec{1}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(argmax(f64({1, kNaN, 3, kNaN}, {4}), 0)) == (IVec{1}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(argmin(f32({1, kNaN, -3, kNaN}, {4}), 0)) == (IVec{1}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(argmax(f64({-kInf, -kInf}, {2}), 0)) == (IVec{0}), boost::test_tools::per_element());
  // Int64 input; the whole-tensor form (flat position, rank-0 result).
  BOOST_TEST(ints_of(argmax(index_tensor({3, 1, 3}, {3}), 0)) == (IVec{0}), boost::test_tools::per_element());
  Tensor all = argmax(f64({1, 7, 9, 2}, {2, 2}));
  BOOST_TEST(all.dim() == 0u);
  BOOST_TEST(ints_of(all) == (IVec{2}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(argmin(f64({1, 7, 9, -2}, {2, 2}))) == (IVec{3}), boost::test_tools::per_element());
  // Rank 0: position 0.
  BOOST_TEST(ints_of(argmax(scalar(4, DType::Float64), -1)) == (IVec{0}), boost::test_tools::per_element());
  BOOST_TEST(argmax(scalar(4, DType::Float64), 0, true).dim() == 0u);
}

BOOST_AUTO_TEST_CASE(argmax_every_axis_against_a_plain_loop) {
  // (3, 4, 5) with small integers (many ties), every axis, keepdim or not.
  const Shape X{3, 4, 5};
  Rng rng(11);
  Vec v(60);
  for (auto& e : v) e = double(rng.uniform_int(0, 3));
  for (DType dt : {DType::Float32, DType::Float64, DType::Int64}) {
    Tensor x = tensor(v, X, dt);
    for (long axis : {0L, 1L, 2L, -1L, -3L}) {
      const std::size_t ax = std::size_t(axis < 0 ? axis + 3 : axis);
      for (bool keepdim : {false, true}) {
        BOOST_TEST_CONTEXT(dtype_name(dt) << " axis " << axis << " keepdim " << keepdim) {
          Shape K = X;
          K[ax] = 1;
          IVec expect_max, expect_min;
          for (std::size_t f = 0; f < numel(K); ++f) {
            auto idx = unravel(f, K);
            std::size_t best_max = 0, best_min = 0;
            for (std::size_t i = 0; i < X[ax]; ++i) {
              idx[ax] = i;
              const double e = v[ravel(idx, X)];
              idx[ax] = best_max;
              if (e > v[ravel(idx, X)]) best_max = i;
              idx[ax] = best_min;
              if (e < v[ravel(idx, X)]) best_min = i;
            }
            expect_max.push_back(std::int64_t(best_max));
            expect_min.push_back(std::int64_t(best_min));
          }
          Tensor ymax = argmax(x, axis, keepdim), ymin = argmin(x, axis, keepdim);
          Shape want = K;
          if (!keepdim) want.erase(want.begin() + long(ax));
          BOOST_TEST(shape_str(ymax.shape()) == shape_str(want));
          BOOST_TEST(ints_of(ymax) == expect_max, boost::test_tools::per_element());
          BOOST_TEST(ints_of(ymin) == expect_min, boost::test_tools::per_element());
        }
      }
    }
  }
  // Other axes may be empty; the reduced one may not.
  BOOST_TEST(shape_str(argmax(f64({}, {0, 3}), 1).shape()) == "(0)");
  check_throws<ShapeError>([] { argmax(f64({}, {2, 0}), 1); }, {"argmax", "'x'", "(2, 0)", "axis 1"});
  check_throws<ShapeError>([] { argmin(f64({}, {0})); }, {"argmin", "'x'", "(0)", "empty"});
  check_throws<DTypeError>([] { argmax(bool_tensor({true}, {1}), 0); }, {"argmax", "'x'", "bool"});
  check_throws<IndexError>([] { argmax(f64({1, 2}, {2}), 1); }, {"argmax", "axis 1"});
  check_throws<IndexError>([] { argmax(scalar(1, DType::Float64), 1); }, {"argmax", "axis 1"});
}

// ===== topk ====================================================================================

// The k best of each row by a reference written independently: a stable sort by value (NaN
// largest), so equal values keep their positions' order.
IVec topk_reference(const Vec& row, std::size_t k, bool largest) {
  std::vector<std::size_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](std::size_t i) { return std::isnan(row[i]) ? kInf : row[i]; };
  auto nan_rank = [&](std::size_t i) { return std::isnan(row[i]) ? 1 : 0; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (nan_rank(a) != nan_rank(b)) return largest ? nan_rank(a) > nan_rank(b) : nan_rank(a) < nan_rank(b);
    return largest ? key(a) > key(b) : key(a) < key(b);
  });
  return IVec(order.begin(), order.begin() + long(k));
}

BOOST_AUTO_TEST_CASE(topk_ties_lower_index_first_and_nan_largest) {
  TopK t = topk(f64({1, 3, 3, 2, 3}, {5}), 3);
  BOOST_TEST(t.values.to_vector() == (Vec{3, 3, 3}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(t.indices) == (IVec{1, 2, 4}), boost::test_tools::per_element());  // PyTorch: 2, 4, 1
  t = topk(f64({1, 3, 3, 2, 3}, {5}), 3, -1, false);
  BOOST_TEST(t.values.to_vector() == (Vec{1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(t.indices) == (IVec{0, 3, 1}), boost::test_tools::per_element());
  t = topk(f64({1, kNaN, 3}, {3}), 2);  // NaN first, as PyTorch
  BOOST_TEST(std::isnan(t.values.to_vector()[0]));
  BOOST_TEST(ints_of(t.indices) == (IVec{1, 2}), boost::test_tools::per_element());
  t = topk(f64({1, kNaN, 3}, {3}), 2, 0, false);  // NaN last
  BOOST_TEST(t.values.to_vector() == (Vec{1, 3}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(t.indices) == (IVec{0, 2}), boost::test_tools::per_element());
  // sorted = false: the same k, in position order.
  t = topk(f64({5, 1, 4, 9, 2}, {5}), 3, 0, true, false);
  BOOST_TEST(ints_of(t.indices) == (IVec{0, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(t.values.to_vector() == (Vec{5, 4, 9}), boost::test_tools::per_element());
  // k = 0 and k = n; int64 values; rank 0.
  t = topk(f64({1, 2, 3, 4}, {2, 2}), 0);
  BOOST_TEST(shape_str(t.values.shape()) == "(2, 0)");
  BOOST_TEST(shape_str(t.indices.shape()) == "(2, 0)");
  t = topk(index_tensor({4, -1, 7}, {3}), 3);
  BOOST_TEST(ints_of(t.values) == (IVec{7, 4, -1}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(t.indices) == (IVec{2, 0, 1}), boost::test_tools::per_element());
  t = topk(scalar(2.5, DType::Float64), 1);
  BOOST_TEST(t.values.dim() == 0u);
  BOOST_TEST(t.values.item() == 2.5);
}

BOOST_AUTO_TEST_CASE(topk_against_a_stable_sort_on_logits_sized_rows) {
  // (64, 100) rows of small integers (ties everywhere) with a few NaN, k = 1, 5, 100, both
  // directions, and a (5, 64) layout with the classes on axis 0 (a strided row).
  const std::size_t R = 64, V = 100;
  Rng rng(5);
  Vec v(R * V);
  for (auto& e : v) e = double(rng.uniform_int(-4, 4));
  for (std::size_t i = 0; i < v.size(); i += 97) v[i] = kNaN;
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = tensor(v, {R, V}, dt);
    Tensor xt = transpose(x, 0, 1);  // (V, R): rows along axis 0
    for (std::size_t k : {1u, 5u, 100u})
      for (bool largest : {true, false}) {
        BOOST_TEST_CONTEXT(dtype_name(dt) << " k " << k << " largest " << largest) {
          TopK t = topk(x, long(k), -1, largest);
          TopK tt = topk(xt, long(k), 0, largest);
          BOOST_TEST_REQUIRE(shape_str(t.indices.shape()) == shape_str(Shape{R, k}));
          BOOST_TEST_REQUIRE(shape_str(tt.indices.shape()) == shape_str(Shape{k, R}));
          const IVec got = ints_of(t.indices), got_t = ints_of(tt.indices);
          const Vec vals = t.values.to_vector();
          bool ok = true;
          for (std::size_t r = 0; r < R && ok; ++r) {
            const Vec row(v.begin() + long(r * V), v.begin() + long((r + 1) * V));
            const IVec expect = topk_reference(row, k, largest);
            for (std::size_t j = 0; j < k && ok; ++j) {
              ok = got[r * k + j] == expect[j] && got_t[j * R + r] == expect[j];
              const double want = dt == DType::Float32 ? double(float(row[std::size_t(expect[j])])) : row[std::size_t(expect[j])];
              ok = ok && (vals[r * k + j] == want || (std::isnan(want) && std::isnan(vals[r * k + j])));
              if (!ok) BOOST_ERROR("row " << r << " rank " << j << ": index " << got[r * k + j] << " / " << got_t[j * R + r] << ", expected " << expect[j]);
            }
          }
        }
      }
  }
}

BOOST_AUTO_TEST_CASE(topk_matches_pytorch_and_its_gradient) {
  test::Golden g("topk", kSelectFixtures);
  // With ties: values only (PyTorch's tie order is unspecified).
  const Tensor ties = g.at("x_ties");
  BOOST_TEST(same_values(topk(ties, 3).values, g.at("values_ties_k3_last")));
  BOOST_TEST(same_values(topk(ties, 2, 0, false).values, g.at("values_ties_k2_axis0_smallest")));
  // Distinct values: indices and the scattered gradient.
  const Tensor x = g.leaf("x");
  TopK t = topk(x, 3, 1);
  BOOST_TEST(ints_of(t.indices) == ints_of(g.at("indices")), boost::test_tools::per_element());
  BOOST_TEST(same_values(t.values, g.at("values")));
  BOOST_TEST(same_values(grads_of(t.values, g.at("upstream.values"), {x})[0], g.at("grad.values.x")));
  BOOST_TEST(!t.indices.requires_grad());
  g.check_all_used();
}

BOOST_AUTO_TEST_CASE(topk_errors) {
  check_throws<ValueError>([] { topk(f64({1, 2, 3, 4, 5, 6}, {2, 3}), 4); },
                           {"topk", "k = 4", "axis -1", "size 3", "'x'", "(2, 3)"});
  check_throws<ValueError>([] { topk(f64({1, 2, 3}, {3}), -1); }, {"topk", "k = -1", "(3)"});
  check_throws<IndexError>([] { topk(f64({1, 2, 3}, {3}), 1, 1); }, {"topk", "axis 1"});
  check_throws<DTypeError>([] { topk(bool_tensor({true}, {1}), 1); }, {"topk", "'x'", "bool"});
}

// ===== gather / scatter_add / index_select / index_add =========================================

BOOST_AUTO_TEST_CASE(gather_family_matches_pytorch) {
  test::Golden g("gather", kSelectFixtures);
  const Tensor x = g.leaf("x"), src = g.leaf("src"), src_sel = g.leaf("src_sel");
  const Tensor il = g.at("index_last"), ifst = g.at("index_first"), isel = g.at("index_sel");
  struct Case {
    const char* name;
    Tensor y;
    std::vector<std::pair<const char*, Tensor>> wrt;
  };
  const Case cases[] = {{"gather_last", gather(x, 2, il), {{"x", x}}},
                        {"gather_first", gather(x, -3, ifst), {{"x", x}}},
                        {"scatter_add", scatter_add(x, -1, il, src), {{"x", x}, {"src", src}}},
                        {"index_select", index_select(x, 2, isel), {{"x", x}}},
                        {"index_add", index_add(x, 2, isel, src_sel), {{"x", x}, {"src_sel", src_sel}}}};
  test::Deviation dev;
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      const bool exact = std::string(c.name).find("add") == std::string::npos;  // a copy: exact
      if (exact) BOOST_TEST(same_values(c.y, g.at(c.name)));
      else test::compare(c.name, c.y, g.at(c.name), dev);
      std::vector<Tensor> xs;
      for (const auto& w : c.wrt) xs.push_back(w.second);
      const auto gs = grads_of(c.y, g.at(std::string("upstream.") + c.name), xs);
      for (std::size_t i = 0; i < xs.size(); ++i)
        test::compare(std::string("grad.") + c.name + "." + c.wrt[i].first, gs[i],
                      g.at(std::string("grad.") + c.name + "." + c.wrt[i].first), dev);
    }
  }
  test::report(g, dev);
  g.check_all_used();
}

BOOST_AUTO_TEST_CASE(gather_against_a_plain_loop_any_dtype) {
  // torch.gather's definition, out[i][j][k] = x[i][j][index[i][j][k]] (axis 2) etc., by hand.
  const Shape X{2, 3, 4}, I{2, 2, 3};
  Vec xv(24);
  std::iota(xv.begin(), xv.end(), 0.0);
  Rng rng(3);
  for (std::size_t axis = 0; axis < 3; ++axis) {
    IVec iv(numel(I));
    for (auto& e : iv) e = rng.uniform_int(0, std::int64_t(X[axis]) - 1);
    Tensor index = index_tensor(iv, I);
    Vec expect(iv.size());
    for (std::size_t f = 0; f < iv.size(); ++f) {
      auto pos = unravel(f, I);
      pos[axis] = std::size_t(iv[f]);
      expect[f] = xv[ravel(pos, X)];
    }
    for (DType dt : {DType::Float32, DType::Float64, DType::Int64}) {
      BOOST_TEST_CONTEXT("axis " << axis << " " << dtype_name(dt)) {
        Tensor y = gather(tensor(xv, X, dt), long(axis), index);
        BOOST_TEST((y.dtype() == dt));
        BOOST_TEST(y.to_vector() == expect, boost::test_tools::per_element());
      }
    }
    // scatter_add's definition: y = x; y[.. index ..] += src, repeats adding up.
    Vec sv(iv.size());
    for (std::size_t f = 0; f < sv.size(); ++f) sv[f] = double(f + 1) * 0.5;
    Vec sexpect = xv;
    for (std::size_t f = 0; f < iv.size(); ++f) {
      auto pos = unravel(f, I);
      pos[axis] = std::size_t(iv[f]);
      sexpect[ravel(pos, X)] += sv[f];
    }
    BOOST_TEST(scatter_add(f64(xv, X), long(axis), index, f64(sv, I)).to_vector() == sexpect,
               boost::test_tools::per_element());
  }
  // Beam search's use: reorder int64 token histories (beams, T) by back-pointers.
  Tensor hist = index_tensor({10, 11, 20, 21, 30, 31}, {3, 2});
  Tensor back = index_tensor({2, 2, 0}, {3});
  BOOST_TEST(ints_of(index_select(hist, 0, back)) == (IVec{30, 31, 30, 31, 10, 11}), boost::test_tools::per_element());
  // Bool masks too.
  Tensor m = bool_tensor({true, false, false, true}, {2, 2});
  BOOST_TEST(bools_of(gather(m, 1, index_tensor({1, 1, 0, 1}, {2, 2}))) == (std::vector<bool>{false, false, false, true}),
             boost::test_tools::per_element());
  // index_add with repeated indices (embedding backward's sums).
  Tensor acc = index_add(zeros({3, 2}, DType::Float64), 0, index_tensor({2, 0, 2}, {3}), f64({1, 2, 3, 4, 5, 6}, {3, 2}));
  BOOST_TEST(acc.to_vector() == (Vec{3, 4, 0, 0, 6, 8}), boost::test_tools::per_element());
  // Int64 adds wrap around (no undefined signed overflow).
  const std::int64_t top = std::numeric_limits<std::int64_t>::max();
  BOOST_TEST(ints_of(scatter_add(index_tensor({top, 1}, {2}), 0, index_tensor({0, 0}, {2}), index_tensor({1, 2}, {2}))) ==
                 (IVec{std::numeric_limits<std::int64_t>::min() + 2, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(ints_of(index_add(index_tensor({1, top}, {2}), 0, index_tensor({1}, {1}), index_tensor({1}, {1}))) ==
                 (IVec{1, std::numeric_limits<std::int64_t>::min()}),
             boost::test_tools::per_element());
  // Rank 0 x and index; empty index.
  BOOST_TEST(gather(scalar(5, DType::Float64), 0, index_tensor({0}, {})).item() == 5.0);
  BOOST_TEST(shape_str(gather(f64({1, 2}, {2}), 0, index_tensor({}, {0})).shape()) == "(0)");
  BOOST_TEST(shape_str(index_select(f64({1, 2, 3, 4}, {2, 2}), 1, index_tensor({1}, {})).shape()) == "(2, 1)");
}

// index_add_zeros is index_add into zeros, bit for bit: increasing indices with gaps (the
// copy path), repeats and a decreasing order (the add path), an inner axis, Int64, rank 0.
BOOST_AUTO_TEST_CASE(index_add_zeros_is_index_add_into_zeros) {
  Rng rng(31);
  struct Case {
    Shape shape;
    long axis;
    IVec index;
  };
  const Case cases[] = {{{5, 3}, 0, {0, 2, 3}}, {{5, 3}, 0, {1, 4}}, {{5, 3}, 0, {4, 1, 4, 0}},
                        {{2, 4, 3}, 1, {3, 0}},  {{2, 4, 3}, -1, {0, 1, 2}}, {{4, 2}, 0, {}}};
  for (const Case& c : cases) {
    Shape src_shape = c.shape;
    src_shape[normalize_axis("t", c.axis, c.shape)] = c.index.size();
    const Tensor idx = index_tensor(c.index, {c.index.size()});
    for (DType dt : {DType::Float32, DType::Float64}) {
      const Tensor src = randn(src_shape, rng, dt);
      BOOST_TEST(test::same_bits(index_add_zeros(c.shape, c.axis, idx, src), index_add(zeros(c.shape, dt), c.axis, idx, src)),
                 shape_str(c.shape) << " axis " << c.axis);
    }
    const Tensor isrc = index_tensor(IVec(numel(src_shape), 7), src_shape);
    BOOST_TEST(ints_of(index_add_zeros(c.shape, c.axis, idx, isrc)) ==
                   ints_of(index_add(index_tensor(IVec(numel(c.shape), 0), c.shape), c.axis, idx, isrc)),
               boost::test_tools::per_element());
  }
  BOOST_TEST(index_add_zeros({}, 0, index_tensor({0}, {}), scalar(2.5, DType::Float64)).item() == 2.5);
  check_throws<IndexError>([] { index_add_zeros({}, 1, index_tensor({0}, {}), scalar(2.5, DType::Float64)); },
                           {"index_add_zeros"});
  // -0.0 becomes +0.0, as index_add into zeros gives (0 + -0 = +0), on both paths.
  const Tensor negz = f64({-0.0, 1.0, -0.0, -0.0}, {4});
  for (const IVec& ix : {IVec{0, 1, 2, 4}, IVec{4, 1, 0, 2}})
    BOOST_TEST(test::same_bits(index_add_zeros({5}, 0, index_tensor(ix, {4}), negz),
                               index_add(zeros({5}, DType::Float64), 0, index_tensor(ix, {4}), negz)));
  // Differentiable in src, twice (index_select is its adjoint and the other way round).
  const Tensor src = test::leaf(Vec{1, -2, 3, 0.5, 2, -1}, {3, 2});
  const auto f = [](const std::vector<Tensor>& in) {
    const Tensor y = index_add_zeros({4, 2}, 0, index_tensor({3, 0, 3}, {3}), in[0]);
    return mul(y, y);
  };
  auto r = gradgradcheck(f, {src}, {"index_add_zeros squared"});
  BOOST_TEST(r.ok, r.message);
  // Errors, nothing made.
  check_throws<IndexError>([] { index_add_zeros({3, 2}, 0, index_tensor({3}, {1}), f64({1, 2}, {1, 2})); },
                           {"index_add_zeros", "index 3", "'shape' (3, 2)", "0 to 2"});
  check_throws<ShapeError>([] { index_add_zeros({3, 2}, 0, index_tensor({0, 1}, {2}), f64({1, 2}, {1, 2})); },
                           {"index_add_zeros", "'src' (1, 2)", "(2, 2)", "'shape' (3, 2)"});
  check_throws<DTypeError>([] { index_add_zeros({3}, 0, index_tensor({0}, {1}), bool_tensor({true}, {1})); },
                           {"index_add_zeros", "'src'", "bool"});
  check_throws<DTypeError>([] { index_add_zeros({3}, 0, f64({0}, {1}), f64({1}, {1})); }, {"index_add_zeros", "'index'", "int64"});
  check_throws<IndexError>([] { index_add_zeros({3}, 1, index_tensor({0}, {1}), f64({1}, {1})); }, {"index_add_zeros"});
}

// pack_rows / unpack_rows: index_select / index_add_zeros over the merged leading axes.
BOOST_AUTO_TEST_CASE(pack_rows_and_unpack_rows) {
  Rng rng(32);
  const Tensor x = randn({2, 3, 4}, rng, DType::Float64), idx = index_tensor({0, 2, 5}, {3});
  BOOST_TEST(test::same_bits(pack_rows(x, idx), index_select(reshape(x, {6, 4}), 0, idx)));
  const Tensor y = randn({3, 4}, rng, DType::Float64);
  BOOST_TEST(test::same_bits(unpack_rows(y, idx, {2, 3}), reshape(index_add_zeros({6, 4}, 0, idx, y), {2, 3, 4})));
  BOOST_TEST(ints_of(pack_rows(index_tensor({1, 2, 3, 4, 5, 6}, {3, 2}), index_tensor({2, 0}, {2}))) == (IVec{5, 6, 1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(bools_of(pack_rows(bool_tensor({true, false, false, true}, {2, 2}), index_tensor({1}, {1}))) ==
                 (std::vector<bool>{false, true}),
             boost::test_tools::per_element());
  check_throws<ShapeError>([&] { pack_rows(f64({1, 2}, {2}), index_tensor({0}, {1})); }, {"pack_rows", "'x' (2)", "rank >= 2"});
  check_throws<IndexError>([&] { pack_rows(x, index_tensor({6}, {1})); }, {"pack_rows", "index 6", "'x' (2, 3, 4)", "0 to 5"});
  check_throws<ShapeError>([&] { unpack_rows(y, index_tensor({0, 1}, {2}), {2, 3}); }, {"unpack_rows", "'src' (3, 4)", "'index' (2)"});
  check_throws<IndexError>([&] { unpack_rows(y, index_tensor({0, 1, 6}, {3}), {2, 3}); },
                           {"unpack_rows", "index 6", "'rows' (2, 3)"});
  check_throws<ShapeError>([&] { unpack_rows(x, idx, {2, 3}); }, {"unpack_rows", "'src' (2, 3, 4)", "(N, F)"});
  check_throws<DTypeError>([&] { unpack_rows(bool_tensor({true}, {1, 1}), index_tensor({0}, {1}), {1}); }, {"unpack_rows", "bool"});
  check_throws<ShapeError>([&] { unpack_rows(f64({1, 2}, {1, 2}), index_tensor({0}, {1}), {}); },
                           {"unpack_rows", "'rows'", "at least one axis"});
}

BOOST_AUTO_TEST_CASE(gather_family_errors_name_the_index_and_its_position) {
  Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  check_throws<IndexError>([&] { gather(x, 1, index_tensor({0, 1, 4, 0}, {2, 2})); },
                           {"gather", "index 4", "position (1, 0)", "'index' (2, 2)", "axis 1", "'x' (2, 4)", "0 to 3"});
  check_throws<IndexError>([&] { gather(x, 1, index_tensor({0, -1}, {1, 2})); },
                           {"gather", "index -1", "position (0, 1)", "'index' (1, 2)"});
  check_throws<ShapeError>([&] { gather(x, 1, index_tensor({0, 1}, {2})); }, {"gather", "'index' (2)", "rank", "'x' (2, 4)"});
  check_throws<ShapeError>([&] { gather(x, 1, index_tensor({0, 0, 0}, {3, 1})); },
                           {"gather", "'index' (3, 1)", "'x' (2, 4)", "axis 0"});
  check_throws<DTypeError>([&] { gather(x, 1, f64({0, 1}, {1, 2})); }, {"gather", "'index'", "int64", "float64"});
  check_throws<IndexError>([&] { gather(x, 2, index_tensor({0}, {1, 1})); }, {"gather", "axis 2"});
  check_throws<ShapeError>([&] { scatter_add(x, 1, index_tensor({0, 1}, {1, 2}), f64({1, 2, 3}, {1, 3})); },
                           {"scatter_add", "'src' (1, 3)", "'index' (1, 2)"});
  check_throws<DTypeError>([&] { scatter_add(x, 1, index_tensor({0}, {1, 1}), f32({1}, {1, 1})); },
                           {"scatter_add", "'src'", "float32", "'x'", "float64"});
  check_throws<IndexError>([&] { scatter_add(x, 0, index_tensor({2}, {1, 1}), f64({1}, {1, 1})); },
                           {"scatter_add", "index 2", "position (0, 0)", "axis 0", "(2, 4)"});
  check_throws<IndexError>([&] { index_select(x, 0, index_tensor({0, 5}, {2})); },
                           {"index_select", "index 5", "position (1)", "'index' (2)", "axis 0", "'x' (2, 4)"});
  check_throws<ShapeError>([&] { index_select(x, 0, index_tensor({0, 1}, {1, 2})); },
                           {"index_select", "'index' (1, 2)", "1-D"});
  check_throws<ShapeError>([&] { index_add(x, 1, index_tensor({0, 1}, {2}), f64({1, 2, 3}, {1, 3})); },
                           {"index_add", "'src' (1, 3)", "(2, 2)"});
  check_throws<IndexError>([] { gather(f64({}, {2, 0}), 1, index_tensor({0}, {1, 1})); },
                           {"gather", "index 0", "it is empty"});
}

// Shape ops move Int64 and Bool tensors too: the char GPT's target gather and beam search's
// token histories are written with them.
BOOST_AUTO_TEST_CASE(shape_ops_take_index_and_mask_tensors) {
  // gather(log_probs (B, T, V), -1, unsqueeze(targets, -1)) -> (B, T, 1), the PyTorch idiom.
  Tensor logp = f64({0.1, 0.2, 0.7, 0.3, 0.3, 0.4, 0.5, 0.25, 0.25, 0.6, 0.2, 0.2}, {2, 2, 3});
  Tensor targets = index_tensor({2, 0, 1, 0}, {2, 2});
  Tensor picked = squeeze(gather(logp, -1, unsqueeze(targets, -1)), -1);
  BOOST_TEST(picked.to_vector() == (Vec{0.7, 0.3, 0.25, 0.6}), boost::test_tools::per_element());
  // Histories (beams, t) extended by one token, the oldest dropped, reordered.
  Tensor hist = index_tensor({1, 2, 3, 4}, {2, 2});
  Tensor longer = concat({hist, index_tensor({7, 8}, {2, 1})}, 1);
  BOOST_TEST(ints_of(longer) == (IVec{1, 2, 7, 3, 4, 8}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(narrow(longer, 1, 1, 2)) == (IVec{2, 7, 4, 8}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(slice(longer, 1, -1)) == (IVec{7, 8}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(transpose(hist, 0, 1)) == (IVec{1, 3, 2, 4}), boost::test_tools::per_element());
  const auto halves = chunk(longer, 2, 0);
  BOOST_TEST(ints_of(halves[1]) == (IVec{3, 4, 8}), boost::test_tools::per_element());
  Tensor mask = bool_tensor({true, false, false, false, true, true}, {2, 3});
  BOOST_TEST(bools_of(permute(mask, {1, 0})) == (std::vector<bool>{true, false, false, true, false, true}),
             boost::test_tools::per_element());
  BOOST_TEST(ints_of(unnarrow(index_tensor({5}, {1}), 0, 1, 3)) == (IVec{0, 5, 0}), boost::test_tools::per_element());
  check_throws<DTypeError>([&] { concat({hist, f64({1, 2}, {2, 1})}, 1); }, {"concat", "xs[1]", "float64", "int64"});
}

// ===== logsumexp ===============================================================================

BOOST_AUTO_TEST_CASE(logsumexp_matches_pytorch_with_masked_entries) {
  test::Golden g("logsumexp", kSelectFixtures);
  const Tensor x = g.leaf("x"), big = g.leaf("big");  // x (3, 5), row 1 has two -inf
  struct Case {
    const char* name;
    Tensor y;
    const char* input;
    Tensor wrt;
  };
  const Case cases[] = {{"last", logsumexp(x, {-1}), "x", x},
                        {"first_keepdim", logsumexp(x, {0}, true), "x", x},
                        {"all", logsumexp(x, {0, 1}), "x", x},
                        {"big_last", logsumexp(big, {-1}), "big", big}};
  test::Deviation dev;
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      test::compare(c.name, c.y, g.at(c.name), dev);
      const auto gs = grads_of(c.y, g.at(std::string("upstream.") + c.name), {c.wrt});
      test::compare(std::string("grad.") + c.name + "." + c.input, gs[0],
                    g.at(std::string("grad.") + c.name + "." + c.input), dev);
    }
  }
  test::report(g, dev);
  g.check_all_used();
}

BOOST_AUTO_TEST_CASE(logsumexp_against_a_plain_loop_and_without_overflow) {
  // (2, 3, 4) over each axis and pairs of axes, float64 and float32.
  const Shape X{2, 3, 4};
  const Vec v = test::vals(24, 9, -3, 3);
  for (const std::vector<long>& axes : std::vector<std::vector<long>>{{0}, {1}, {-1}, {0, 2}, {2, 1}, {}}) {
    std::vector<bool> red(3, axes.empty());
    for (long a : axes) red[std::size_t(a < 0 ? a + 3 : a)] = true;
    Shape K = X;
    for (std::size_t d = 0; d < 3; ++d)
      if (red[d]) K[d] = 1;
    Vec sums(numel(K), 0.0);
    for (std::size_t f = 0; f < 24; ++f) {
      auto idx = unravel(f, X);
      for (std::size_t d = 0; d < 3; ++d)
        if (red[d]) idx[d] = 0;
      sums[ravel(idx, K)] += std::exp(v[f]);
    }
    Vec expect;
    for (double s : sums) expect.push_back(std::log(s));
    BOOST_TEST_CONTEXT("axes " << axes.size()) {
      BOOST_TEST(allclose(logsumexp(f64(v, X), axes, true), expect, 1e-13, 1e-13));
      BOOST_TEST(allclose(logsumexp(f32(v, X), axes, true), expect, 2e-6, 1e-6));
      Shape dropped;
      for (std::size_t d = 0; d < 3; ++d)
        if (!red[d]) dropped.push_back(X[d]);
      BOOST_TEST(shape_str(logsumexp(f64(v, X), axes).shape()) == shape_str(dropped));
    }
  }
  // Large logits: exp would overflow float32 at 89 (and float64 at 710); the max shift does not.
  Tensor y = logsumexp(f32({100, 100, 90}, {3}), {0});
  BOOST_TEST(std::abs(y.item() - (100 + std::log(2 + std::exp(-10.0)))) < 1e-4);
  BOOST_TEST(logsumexp(f64({800, 800}, {2}), {0}).item() == 800 + std::log(2.0));
  BOOST_TEST(logsumexp(f64({-800, -800}, {2}), {0}).item() == -800 + std::log(2.0));
}

BOOST_AUTO_TEST_CASE(logsumexp_infinite_rows_give_finite_gradients) {
  // Row 0: only -inf -> -inf, zero gradient. Row 1: two +inf -> +inf, gradient 1/2 on each.
  // Row 2: finite. Row 3: NaN -> NaN.
  for (DType dt : {DType::Float64, DType::Float32}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tensor x = tensor({-kInf, -kInf, -kInf, kInf, 1, kInf, 0, std::log(3.0), -kInf, kNaN, 1, 2}, {4, 3}, dt);
      x.set_requires_grad(true);
      Tensor y = logsumexp(x, {1});
      const Vec yv = y.to_vector();
      BOOST_TEST(yv[0] == -kInf);
      BOOST_TEST(yv[1] == kInf);
      BOOST_TEST(std::abs(yv[2] - std::log(4.0)) < 1e-6);
      BOOST_TEST(std::isnan(yv[3]));
      Tensor u = tensor({2, 4, 8, 0}, {4}, dt);  // row 3's gradient is NaN by definition: keep it out
      const Vec gx = grad({sum(mul(y, u))}, {x})[0].to_vector();
      const Vec expect = {0, 0, 0, 2, 0, 2, 8 * 0.25, 8 * 0.75, 0};
      for (std::size_t i = 0; i < 9; ++i)  // rows 0 and 1 exactly; row 2 is a softmax (float32 rounding)
        BOOST_TEST(std::abs(gx[i] - expect[i]) <= (i < 6 ? 0.0 : 1e-6), "element " << i << ": " << gx[i] << " vs " << expect[i]);
    }
  }
  // The -inf row differentiated twice (create_graph): still finite zeros.
  Tensor x = test::leaf({-kInf, -kInf, 0.5, 1.5}, {2, 2});
  Tensor gx = grad({sum(logsumexp(x, {-1}))}, {x}, {}, {true, true})[0];
  BOOST_TEST(test::all_finite(gx));
  Tensor ggx = grad({sum(mul(gx, gx))}, {x})[0];
  BOOST_TEST(test::all_finite(ggx));
  BOOST_TEST(ggx.to_vector()[0] == 0.0);
  // An empty axis gives -inf (an empty sum is 0), as PyTorch; nothing to differentiate.
  Tensor e = logsumexp(f64({}, {2, 0}), {1});
  BOOST_TEST(e.to_vector() == (Vec{-kInf, -kInf}), boost::test_tools::per_element());
  BOOST_TEST(shape_str(logsumexp(f64({}, {0, 3}), {1}).shape()) == "(0)");
  // Errors.
  check_throws<DTypeError>([] { logsumexp(index_tensor({1}, {1}), {0}); }, {"logsumexp", "'x'", "int64"});
  check_throws<IndexError>([] { logsumexp(f64({1, 2}, {2}), {1}); }, {"logsumexp", "axis 1"});
  check_throws<ValueError>([] { logsumexp(f64({1, 2, 3, 4}, {2, 2}), {0, -2}); }, {"logsumexp", "axis"});
}

// ===== cumsum ==================================================================================

BOOST_AUTO_TEST_CASE(cumsum_matches_pytorch_and_accumulates_float32_in_float64) {
  test::Golden g("cumsum", kSelectFixtures);
  const Tensor x = g.leaf("x");
  test::Deviation dev;
  for (auto [name, axis] : {std::pair<const char*, long>{"axis0", 0}, {"axis1", -1}}) {
    Tensor y = cumsum(x, axis);
    test::compare(name, y, g.at(name), dev);
    test::compare(std::string("grad.") + name + ".x", grads_of(y, g.at(std::string("upstream.") + name), {x})[0],
                  g.at(std::string("grad.") + name + ".x"), dev);
  }
  BOOST_TEST(ints_of(cumsum(g.at("xi"), 1)) == ints_of(g.at("xi_axis1")), boost::test_tools::per_element());
  test::report(g, dev);
  g.check_all_used();
  // 1e8 then eight 1s in float32: a float32 running sum stays at 1e8 (its spacing there is 8);
  // accumulated in float64 and rounded per element, the last is 1e8 + 8 (as PyTorch on the CPU).
  Vec v(9, 1.0);
  v[0] = 1e8;
  const Vec y = cumsum(f32(v, {9}), 0).to_vector();
  for (std::size_t i = 0; i < 9; ++i) BOOST_TEST(y[i] == double(float(1e8 + double(i))));
  BOOST_TEST(y[8] == 1e8 + 8);
  // Int64 wraps around like PyTorch (no undefined signed overflow).
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  BOOST_TEST(ints_of(cumsum(index_tensor({big, 1}, {2}), 0)) == (IVec{big, std::numeric_limits<std::int64_t>::min()}),
             boost::test_tools::per_element());
  // The reversed-cumsum gradient by hand: d/dx of (y . u) = (u3 + u2 + u1, u3 + u2, u3).
  Tensor p = test::leaf({1, 2, 3}, {3});
  BOOST_TEST(grad({sum(mul(cumsum(p, 0), f64({1, 10, 100}, {3})))}, {p})[0].to_vector() == (Vec{111, 110, 100}),
             boost::test_tools::per_element());
  BOOST_TEST(cumsum(scalar(4, DType::Float64), 0).item() == 4.0);
  check_throws<DTypeError>([] { cumsum(bool_tensor({true}, {1}), 0); }, {"cumsum", "'x'", "bool"});
  check_throws<IndexError>([] { cumsum(f64({1}, {1}), 1); }, {"cumsum", "axis 1"});
}

// ===== arange / randint ========================================================================

BOOST_AUTO_TEST_CASE(arange_length_rule_and_values) {
  struct Case {
    double start, end, step;
    std::size_t n;
  };
  for (const Case& c : {Case{0, 1, 0.3, 4}, Case{1, 0, -0.3, 4}, Case{0, 10, 3, 4}, Case{3, 3, 1, 0},
                        Case{-2.5, 2.5, 0.5, 10}, Case{0, 1, 0.1, 10}, Case{5, -5, -2, 5}}) {
    BOOST_TEST_CONTEXT(c.start << " " << c.end << " " << c.step) {
      for (DType dt : {DType::Float32, DType::Float64}) {
        Tensor a = arange(c.start, c.end, c.step, dt);
        BOOST_TEST((a.dtype() == dt));
        BOOST_TEST_REQUIRE(a.numel() == c.n);
        for (std::size_t i = 0; i < c.n; ++i) {
          const double want = c.start + double(i) * c.step;
          BOOST_TEST(a.to_vector()[i] == (dt == DType::Float32 ? double(float(want)) : want));
        }
      }
    }
  }
  BOOST_TEST(ints_of(arange(0, 10, 3, DType::Int64)) == (IVec{0, 3, 6, 9}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(arange(5, -5, -3, DType::Int64)) == (IVec{5, 2, -1, -4}), boost::test_tools::per_element());
  BOOST_TEST(ints_of(arange(-3, 0, 1, DType::Int64)) == (IVec{-3, -2, -1}), boost::test_tools::per_element());
  const double p53 = 9007199254740992.0;
  BOOST_TEST(ints_of(arange(p53 - 2, p53, 1, DType::Int64)) == (IVec{9007199254740990, 9007199254740991}),
             boost::test_tools::per_element());
  BOOST_TEST(arange(4).to_vector() == (Vec{0, 1, 2, 3}), boost::test_tools::per_element());  // the old form
  BOOST_TEST(arange(0, 3).to_vector() == (Vec{0, 1, 2}), boost::test_tools::per_element());
  check_throws<ValueError>([] { arange(0, 1, 0); }, {"arange", "step", "0"});
  check_throws<ValueError>([] { arange(5, 0, 1); }, {"arange", "step 1", "start 5", "end 0"});
  check_throws<ValueError>([] { arange(0, kInf, 1); }, {"arange", "finite"});
  check_throws<ValueError>([] { arange(0, 1, 0.5, DType::Int64); }, {"arange", "int64", "whole numbers"});
  check_throws<DTypeError>([] { arange(0, 2, 1, DType::Bool); }, {"arange", "bool"});
  check_throws<ValueError>([] { arange(0, 1e15, 1); }, {"arange", "2^40"});
  check_throws<ValueError>([] { arange(0, 1e300, 1e-300); }, {"arange", "2^40"});
}

BOOST_AUTO_TEST_CASE(randint_is_seeded_uniform_in_range) {
  Rng r1(42), r2(42), ref(42);
  Tensor a = randint(-3, 4, {1000}, r1), b = randint(-3, 4, {1000}, r2);
  BOOST_TEST(test::same_bits(a, b));
  BOOST_TEST((r1 == r2));
  const IVec v = ints_of(a);
  for (std::size_t i = 0; i < v.size(); ++i) BOOST_TEST_REQUIRE(v[i] == ref.uniform_int(-3, 3));  // the documented draw
  std::vector<int> counts(7, 0);
  for (auto e : v) counts[std::size_t(e + 3)]++;
  for (int c : counts) BOOST_TEST(std::abs(c - 1000.0 / 7) < 5 * std::sqrt(1000.0 / 7 * 6 / 7));
  BOOST_TEST(shape_str(randint(0, 2, {2, 0, 3}, r1).shape()) == "(2, 0, 3)");
  const Rng before = r1;
  check_throws<ValueError>([&] { randint(3, 3, {2}, r1); }, {"randint", "low = 3", "high = 3"});
  BOOST_TEST((r1 == before));
  // The full int64 range except its top value.
  Tensor w = randint(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {4}, r1);
  BOOST_TEST(w.numel() == 4u);
}

// ===== multinomial / sample_categorical ========================================================

// The documented algorithm, written independently: cumulative float64 sums by a linear scan.
std::int64_t inverse_cdf_by_scan(const Vec& w, double u) {
  double total = 0;
  for (double e : w) total += e;
  double acc = 0;
  for (std::size_t k = 0; k < w.size(); ++k) {
    acc += w[k];
    if (acc > u * total) return std::int64_t(k);
  }
  return -1;
}

BOOST_AUTO_TEST_CASE(multinomial_follows_the_documented_algorithm) {
  const Vec w = {0.5, 0, 2, 1.5, 0, 1};  // two rows of three, unnormalised
  Rng rng(123), ref(123);
  Tensor y = multinomial(f64(w, {2, 3}), 50, true, rng);
  BOOST_TEST(shape_str(y.shape()) == "(2, 50)");
  const IVec v = ints_of(y);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t j = 0; j < 50; ++j)
      BOOST_TEST_REQUIRE(v[r * 50 + j] == inverse_cdf_by_scan(Vec(w.begin() + long(3 * r), w.begin() + long(3 * r + 3)), ref.uniform()));
  BOOST_TEST((rng == ref));  // exactly one uniform() per draw
  // Same seed, same draws; float32 weights too; (C) input -> (num_samples).
  Rng a(7), b(7);
  BOOST_TEST(test::same_bits(multinomial(f32({1, 2, 3}, {3}), 10, true, a), multinomial(f32({1, 2, 3}, {3}), 10, true, b)));
  BOOST_TEST(shape_str(multinomial(f32({1, 2, 3}, {3}), 10, true, a).shape()) == "(10)");
  BOOST_TEST(shape_str(multinomial(f32({1, 2, 3}, {3}), 0, false, a).shape()) == "(0)");
}

BOOST_AUTO_TEST_CASE(multinomial_frequencies_within_a_binomial_bound) {
  // 20,000 draws from (0.1, 0, 0.2, 0.3, 0.4) * 7 (unnormalised): each class count within 5
  // standard deviations of n p (deterministic seed, so this can never flake), class 1 never.
  const Vec p = {0.1, 0, 0.2, 0.3, 0.4};
  Vec w;
  for (double e : p) w.push_back(7 * e);
  const std::size_t n = 20000;
  for (DType dt : {DType::Float32, DType::Float64}) {
    Rng rng(2024);
    const IVec v = ints_of(multinomial(tensor(w, {5}, dt), long(n), true, rng));
    std::vector<double> counts(5, 0);
    for (auto k : v) counts[std::size_t(k)] += 1;
    for (std::size_t k = 0; k < 5; ++k) {
      const double mean = double(n) * p[k], sd = std::sqrt(double(n) * p[k] * (1 - p[k]));
      BOOST_TEST(std::abs(counts[k] - mean) <= 5 * sd + 1e-12, "class " << k << ": " << counts[k] << " vs " << mean);
    }
    BOOST_TEST(counts[1] == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(multinomial_without_replacement) {
  // Every row's samples are distinct and never a zero-weight class; drawing all non-zero
  // classes gives a permutation of them; the first draw follows the full distribution.
  Rng rng(9);
  const Vec w = {1, 0, 3, 2, 0.5, 0, 0, 4};
  for (int rep = 0; rep < 200; ++rep) {
    const IVec v = ints_of(multinomial(f64(w, {2, 4}), 2, false, rng));
    for (std::size_t r = 0; r < 2; ++r) {
      std::vector<std::int64_t> row(v.begin() + long(2 * r), v.begin() + long(2 * r + 2));
      for (auto k : row) BOOST_TEST_REQUIRE(w[4 * r + std::size_t(k)] > 0);
      std::sort(row.begin(), row.end());
      BOOST_TEST_REQUIRE((std::adjacent_find(row.begin(), row.end()) == row.end()));
    }
  }
  // The algorithm by hand: each draw a scan over the remaining weights.
  Rng a(31), ref(31);
  const IVec v = ints_of(multinomial(f64({1, 2, 3, 4}, {4}), 4, false, a));
  Vec left = {1, 2, 3, 4};
  for (std::size_t j = 0; j < 4; ++j) {
    const std::int64_t k = inverse_cdf_by_scan(left, ref.uniform());
    BOOST_TEST(v[j] == k);
    left[std::size_t(k)] = 0;
  }
  BOOST_TEST((a == ref));
  const IVec both = ints_of(multinomial(f64(w, {2, 4}), 2, false, rng));  // row 1: classes 0 and 3
  BOOST_TEST(std::min(both[2], both[3]) == 0);
  BOOST_TEST(std::max(both[2], both[3]) == 3);
  check_throws<ValueError>([&] { multinomial(f64(w, {2, 4}), 3, false, rng); },
                           {"multinomial", "3 distinct samples", "row 1", "(2, 4)", "2 non-zero"});
}

BOOST_AUTO_TEST_CASE(multinomial_errors_name_the_row_and_leave_the_rng_alone) {
  Rng rng(1);
  const Rng before = rng;
  check_throws<ValueError>([&] { multinomial(f64({1, 1, 0, 0}, {2, 2}), 1, true, rng); },
                           {"multinomial", "row 1", "'weights' (2, 2)", "sums to 0"});
  check_throws<ValueError>([&] { multinomial(f64({1, 1, 1, -1}, {2, 2}), 1, true, rng); },
                           {"multinomial", "row 1", "weight -1", "class 1"});
  check_throws<ValueError>([&] { multinomial(f64({kNaN, 1}, {2}), 1, true, rng); },
                           {"multinomial", "row 0", "weight nan", "class 0"});
  check_throws<ValueError>([&] { multinomial(f32({1, kInf}, {2}), 1, true, rng); },
                           {"multinomial", "row 0", "weight inf", "class 1"});
  check_throws<ValueError>([&] { multinomial(f64({1e308, 1e308}, {2}), 1, true, rng); },
                           {"multinomial", "row 0", "sums to inf"});
  check_throws<ValueError>([&] { multinomial(f64({1}, {1}), -1, true, rng); }, {"multinomial", "num_samples", "-1"});
  check_throws<ShapeError>([&] { multinomial(f64({1}, {1, 1, 1}), 1, true, rng); }, {"multinomial", "'weights' (1, 1, 1)"});
  check_throws<ValueError>([&] { multinomial(f64({}, {0}), 1, true, rng); }, {"multinomial", "row 0", "sums to 0"});
  check_throws<DTypeError>([&] { multinomial(index_tensor({1}, {1}), 1, true, rng); }, {"multinomial", "'weights'", "int64"});
  BOOST_TEST((rng == before));
}

BOOST_AUTO_TEST_CASE(sample_categorical_from_logits_with_temperature) {
  // (2, 3, 4) logits -> (2, 3) samples; a -inf logit is never drawn.
  Rng rng(77), ref(77);
  const Vec l = test::vals(24, 4, -2, 2);
  Vec lm = l;
  for (std::size_t i = 0; i < 24; i += 4) lm[i + 1] = -kInf;
  for (double temperature : {1.0, 0.5, 2.0}) {
    Tensor y = sample_categorical(f64(lm, {2, 3, 4}), rng, temperature);
    BOOST_TEST(shape_str(y.shape()) == "(2, 3)");
    const IVec v = ints_of(y);
    for (std::size_t r = 0; r < 6; ++r) {
      Vec p(4);
      double m = -kInf;
      for (std::size_t k = 0; k < 4; ++k) m = std::max(m, lm[4 * r + k]);
      for (std::size_t k = 0; k < 4; ++k) p[k] = std::exp((lm[4 * r + k] - m) / temperature);
      BOOST_TEST(v[r] == inverse_cdf_by_scan(p, ref.uniform()));
      BOOST_TEST(v[r] != 1);
    }
  }
  // Frequencies: softmax(l / T) over 20,000 draws within 5 standard deviations.
  const Vec logits = {1.0, 2.0, 0.5, -kInf};
  for (double temperature : {1.0, 0.7}) {
    Vec p(4);
    double total = 0;
    for (std::size_t k = 0; k < 4; ++k) total += p[k] = std::exp((logits[k] - 2.0) / temperature);
    for (auto& e : p) e /= total;
    Tensor batch = broadcast_to(f32(logits, {1, 4}), {20000, 4});
    const IVec v = ints_of(sample_categorical(batch, rng, temperature));
    std::vector<double> counts(4, 0);
    for (auto k : v) counts[std::size_t(k)] += 1;
    for (std::size_t k = 0; k < 4; ++k) {
      const double mean = 20000 * p[k], sd = std::sqrt(20000 * p[k] * (1 - p[k]));
      BOOST_TEST(std::abs(counts[k] - mean) <= 5 * sd + 1e-12, "T " << temperature << " class " << k);
    }
  }
  const Rng before = rng;
  check_throws<ValueError>([&] { sample_categorical(f64({1, 2}, {2}), rng, 0.0); }, {"sample_categorical", "temperature", "argmax"});
  check_throws<ValueError>([&] { sample_categorical(f64({1, 2}, {2}), rng, kInf); }, {"sample_categorical", "temperature"});
  check_throws<ValueError>([&] { sample_categorical(f64({1, 2}, {2}), rng, kNaN); }, {"sample_categorical", "temperature"});
  check_throws<ValueError>([&] { sample_categorical(f64({1, 2, -kInf, -kInf}, {2, 2}), rng); },
                           {"sample_categorical", "row 1", "'logits' (2, 2)", "no finite logit"});
  check_throws<ValueError>([&] { sample_categorical(f64({1, kNaN}, {2}), rng); }, {"sample_categorical", "row 0", "nan", "class 1"});
  check_throws<ValueError>([&] { sample_categorical(f64({kInf, 1}, {2}), rng); }, {"sample_categorical", "row 0", "inf", "class 0"});
  check_throws<ShapeError>([&] { sample_categorical(scalar(1, DType::Float64), rng); }, {"sample_categorical", "'logits' ()"});
  BOOST_TEST((rng == before));
}

// The README's temperature + top-k recipe: only the k best classes of each row are ever drawn.
BOOST_AUTO_TEST_CASE(top_k_sampling_recipe_draws_only_the_top_k) {
  Rng rng(5);
  Tensor logits = randn({8, 50}, rng);  // (B, V)
  const std::size_t k = 5;
  const IVec best = ints_of(topk(logits, long(k)).indices);
  for (int rep = 0; rep < 50; ++rep) {
    TopK top = topk(logits, long(k));                                     // (B, k), best first
    Tensor kth = narrow(top.values, -1, k - 1, 1);                        // (B, 1): the k-th largest
    Tensor masked = masked_fill(logits, lt(logits, kth), -INFINITY);      // the rest excluded
    const IVec next = ints_of(sample_categorical(masked, rng, 0.8));      // (B)
    for (std::size_t b = 0; b < 8; ++b)
      BOOST_TEST_REQUIRE((std::find(best.begin() + long(b * k), best.begin() + long((b + 1) * k), next[b]) !=
                          best.begin() + long((b + 1) * k)));
  }
}

// ===== patchify ================================================================================

BOOST_AUTO_TEST_CASE(patchify_matches_unfold_and_the_conv_patch_embedding) {
  test::Golden g("patchify", kSelectFixtures);
  const Tensor images = g.leaf("images");  // (2, 3, 8, 12), patch 4
  const std::size_t p = std::size_t(g.integer("patch"));
  Tensor patches = patchify(images, p);
  BOOST_TEST(shape_str(patches.shape()) == "(2, 6, 48)");
  BOOST_TEST(same_values(patches, g.at("patches")));  // a permutation: exact
  BOOST_TEST(same_values(grads_of(patches, g.at("upstream.patches"), {images})[0], g.at("grad.patches.images")));
  // A linear layer on the patch rows with the conv weight (E, C, p, p) flattened is the conv.
  const Tensor w = g.at("weight");
  Tensor emb = linear(patches, reshape(w, {w.shape()[0], numel(w.shape()) / w.shape()[0]}));
  test::Deviation dev;
  test::compare("conv", emb, g.at("conv"), dev);
  test::report(g, dev);
  g.check_all_used();
}

BOOST_AUTO_TEST_CASE(patchify_by_hand_and_errors) {
  // y[b, i * (W/p) + j, (c * p + u) * p + v] = x[b, c, i * p + u, j * p + v], by a plain loop.
  const std::size_t B = 2, C = 2, H = 4, W = 6, P = 2, h = H / P, w = W / P;
  Vec x(B * C * H * W);
  std::iota(x.begin(), x.end(), 0.0);
  Vec expect(x.size());
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t r = 0; r < H; ++r)
        for (std::size_t s = 0; s < W; ++s) {
          const std::size_t n = (r / P) * w + s / P, e = (c * P + r % P) * P + s % P;
          expect[(b * h * w + n) * C * P * P + e] = x[((b * C + c) * H + r) * W + s];
        }
  for (DType dt : {DType::Float32, DType::Float64}) BOOST_TEST(patchify(tensor(x, {B, C, H, W}, dt), P).to_vector() == expect, boost::test_tools::per_element());
  // patch = H = W: one patch per image, the image itself flattened.
  BOOST_TEST(patchify(f64(x, {B, C, 4, 6}), 1).to_vector().size() == x.size());
  check_throws<ValueError>([] { patchify(f64(Vec(2 * 3 * 5 * 4, 0.0), {2, 3, 5, 4}), 2); },
                           {"patchify", "patch size 2", "height 5", "width 4", "(2, 3, 5, 4)"});
  check_throws<ValueError>([] { patchify(f64(Vec(16, 0.0), {1, 1, 4, 4}), 0); }, {"patchify", "patch size 0"});
  check_throws<ShapeError>([] { patchify(f64(Vec(16, 0.0), {4, 4}), 2); }, {"patchify", "'images' (4, 4)", "(B, C, H, W)"});
  check_throws<DTypeError>([] { patchify(index_tensor(IVec(16, 0), {1, 1, 4, 4}), 2); }, {"patchify", "'images'", "int64"});
}

BOOST_AUTO_TEST_SUITE_END()
