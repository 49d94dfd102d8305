// layer_norm (ops/norm.cpp): forward against plain double loops, float32 against float64, the
// fused backward against the differentiable formulas (the create_graph path) and against the
// old composite built from primitive ops, constant rows, empty inputs, and every error.
// gradcheck / gradgradcheck of the registered samples run in test_registry.cpp.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/norm.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::allclose;
using test::f32;
using test::f64;
using test::round32;
using test::vals;

namespace {

using Vec = std::vector<double>;

Tensor leaf(const Tensor& t) {
  Tensor l = t.detach().clone();
  l.set_requires_grad(true);
  return l;
}

// Reference: rows of N, each normalised with its mean and biased variance (plain loops in
// double). w, b empty = no affine part.
Vec ref_layer_norm(const Vec& x, std::size_t N, const Vec& w, const Vec& b, double eps) {
  Vec y(x.size());
  for (std::size_t r = 0; r < x.size() / N; ++r) {
    double m = 0, v = 0;
    for (std::size_t i = 0; i < N; ++i) m += x[r * N + i];
    m /= double(N);
    for (std::size_t i = 0; i < N; ++i) v += (x[r * N + i] - m) * (x[r * N + i] - m);
    v /= double(N);
    for (std::size_t i = 0; i < N; ++i) {
      double e = (x[r * N + i] - m) / std::sqrt(v + eps);
      if (!w.empty()) e *= w[i];
      if (!b.empty()) e += b[i];
      y[r * N + i] = e;
    }
  }
  return y;
}

// The composite layer_norm this op replaced, from primitive ops (differentiated by the engine).
Tensor composite_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor centered = sub(x, mean(x, {-1}, true));
  Tensor var = mean(mul(centered, centered), {-1}, true);
  Tensor y = mul(centered, rsqrt(add_scalar(var, eps)));
  if (w.defined()) y = mul(y, w);
  if (b.defined()) y = add(y, b);
  return y;
}

// Gradients of sum(layer_norm(x, w, b) * g) w.r.t. the leaves among {x, w, b}, by the engine.
// create_graph = true runs layer_norm's differentiable-formula backward, false the fused one.
std::vector<Tensor> grads_of(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f,
                             const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g,
                             bool create_graph) {
  std::vector<Tensor> wrt;
  for (const Tensor& t : {x, w, b})
    if (t.defined() && t.requires_grad()) wrt.push_back(t);
  Tensor y = f(x, w, b);
  GradOptions opt;
  opt.create_graph = create_graph;
  auto gs = grad({y}, wrt, {g}, opt);
  for (auto& t : gs) t = t.detach();
  return gs;
}

// Runs fn, which must throw E whose message starts with "layer_norm:" and contains `parts`.
template <class E>
void check_throws(const char* wanted, const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    BOOST_ERROR("expected " << wanted << ", nothing was thrown");
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    BOOST_TEST(bool(dynamic_cast<const E*>(&e)), "expected " << wanted << ", got " << test::error_kind(e) << ": " << msg);
    BOOST_TEST(msg.rfind("layer_norm:", 0) == 0u, "message does not start with 'layer_norm:': " << msg);
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "message lacks \"" << p << "\": " << msg);
  }
}

struct Affine {
  bool w, b;
  const char* name;
};
const Affine kAffine[] = {{true, true, "weight and bias"}, {false, false, "no affine"},
                          {true, false, "weight only"}, {false, true, "bias only"}};

}  // namespace

BOOST_AUTO_TEST_SUITE(norm)

// ---------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(forward_matches_double_loops) {
  const std::vector<Shape> shapes = {{5}, {3, 5}, {2, 3, 4}, {2, 2, 2, 7}, {4, 1}, {2, 64}};
  unsigned seed = 1;
  for (const Shape& s : shapes)
    for (const Affine& a : kAffine)
      for (double eps : {1e-5, 0.5}) {
        const std::size_t N = s.back();
        Vec xv = vals(numel(s), seed++, -3, 3), wv = vals(N, seed++, 0.5, 1.5), bv = vals(N, seed++);
        if (!a.w) wv.clear();
        if (!a.b) bv.clear();
        BOOST_TEST_CONTEXT(shape_str(s) << " " << a.name << " eps " << eps) {
          Tensor x = f64(xv, s);
          Tensor w = a.w ? f64(wv, {N}) : Tensor(), b = a.b ? f64(bv, {N}) : Tensor();
          Tensor y = layer_norm(x, w, b, eps);
          BOOST_TEST(shape_str(y.shape()) == shape_str(s));
          BOOST_TEST(y.dtype() == DType::Float64);
          BOOST_TEST(allclose(y, ref_layer_norm(xv, N, wv, bv, eps), 1e-12, 1e-13));
          // float32, from the same (rounded) values
          Tensor y32 = layer_norm(f32(xv, s), a.w ? f32(wv, {N}) : Tensor(), a.b ? f32(bv, {N}) : Tensor(), eps);
          BOOST_TEST(y32.dtype() == DType::Float32);
          BOOST_TEST(allclose(y32, ref_layer_norm(round32(xv), N, round32(wv), round32(bv), eps), 2e-5, 2e-5));
        }
      }
}

// The AVX2 and AVX-512 paths both fuse multiply-adds and sum a row over 16 lanes in the same
// order (the AVX-512 path's own kernels for rows of a multiple of 16 included), so float32
// layer_norm gives the same bits on both: y, dx, dw and db, for every affine variant, rows of
// 16, 64 and 80 (whole registers) and 20 (a tail), constant rows included.
BOOST_AUTO_TEST_CASE(float32_is_the_same_bits_on_the_avx2_and_avx512_paths) {
  if (!test::has_avx512_path()) {
    BOOST_TEST_MESSAGE("layer_norm: this CPU has no AVX-512 path to compare with avx2");
    return;
  }
  Rng rng(41);
  std::size_t compared = 0;
  for (std::size_t N : {16, 64, 80, 20})
    for (int affine = 0; affine < 4; ++affine) {
      Tensor x = randn({33, N}, rng, DType::Float32);
      for (std::size_t i = 0; i < N; ++i) x.mutable_data<float>()[3 * N + i] = 2.5f;  // a constant row
      x.set_requires_grad(true);
      Tensor w = (affine & 1) ? randn({N}, rng, DType::Float32) : Tensor();
      Tensor b = (affine & 2) ? randn({N}, rng, DType::Float32) : Tensor();
      if (w.defined()) w.set_requires_grad(true);
      if (b.defined()) b.set_requires_grad(true);
      Tensor g = randn({33, N}, rng, DType::Float32);
      const std::size_t differ = test::float_bits_differ_avx2_avx512([&] {
        Tensor y = layer_norm(x, w, b);
        std::vector<Tensor> wrt{x};
        if (w.defined()) wrt.push_back(w);
        if (b.defined()) wrt.push_back(b);
        auto grads = grad({y}, wrt, {g});
        std::vector<float> all(y.data<float>(), y.data<float>() + y.numel());
        for (auto& t : grads) all.insert(all.end(), t.data<float>(), t.data<float>() + t.numel());
        return all;
      });
      BOOST_TEST_CONTEXT("N " << N << " affine " << affine) BOOST_TEST(differ == 0u);
      ++compared;
    }
  BOOST_TEST(compared == 16u);
}

BOOST_AUTO_TEST_CASE(hand_values) {
  // Row (1, 2, 3, 4): mean 2.5, var 1.25. Row (-2, -2, -2, -2): constant, normalises to 0.
  const double r = 1.0 / std::sqrt(1.25 + 1e-5);
  Tensor y = layer_norm(f64({1, 2, 3, 4, -2, -2, -2, -2}, {2, 4}), f64({1, 2, 1, 1}, {4}),
                        f64({0, 0, 10, 0}, {4}));
  BOOST_TEST(allclose(y, {-1.5 * r, -0.5 * r * 2, 0.5 * r + 10, 1.5 * r, 0, 0, 10, 0}, 1e-14, 1e-14));
  // Default eps is 1e-5, as torch.nn.LayerNorm.
  BOOST_TEST(allclose(layer_norm(f64({1, 3}, {2}), {}, {}), {-1 / std::sqrt(1 + 1e-5), 1 / std::sqrt(1 + 1e-5)},
                      1e-15, 0));
}

BOOST_AUTO_TEST_CASE(large_offset_rows_do_not_cancel) {
  // x = 1e4 + small: a one-pass E[x^2] - E[x]^2 variance loses these digits in float32.
  Vec xv = vals(512, 3, -1, 1);
  for (auto& v : xv) v += 1e4;
  xv = round32(xv);
  Tensor y32 = layer_norm(f32(xv, {1, 512}), {}, {});
  BOOST_TEST(allclose(y32, ref_layer_norm(xv, 512, {}, {}, 1e-5), 1e-3, 1e-3));
}

// float32 runs in AVX2 / AVX-512 clones: rows of whole vectors (512) and rows with a remainder (37).
BOOST_AUTO_TEST_CASE(float32_agrees_with_float64) {
  for (const Shape& s : {Shape{64, 512}, Shape{9, 37}}) {
    BOOST_TEST_CONTEXT(shape_str(s)) {
      const std::size_t N = s[1];
      Vec xv = round32(vals(numel(s), 21, -4, 4)), wv = round32(vals(N, 22, 0.5, 1.5)), bv = round32(vals(N, 23));
      Vec gv = round32(vals(numel(s), 24));
      Tensor y[2];
      std::vector<Tensor> gs[2];
      const DType dts[2] = {DType::Float32, DType::Float64};
      for (int k = 0; k < 2; ++k) {
        Tensor x = tensor(xv, s, dts[k]), w = tensor(wv, {N}, dts[k]), b = tensor(bv, {N}, dts[k]);
        for (const Tensor& t : {x, w, b}) t.set_requires_grad(true);
        y[k] = layer_norm(x, w, b);
        gs[k] = grad({y[k]}, {x, w, b}, {tensor(gv, s, dts[k])});
        BOOST_TEST(y[k].dtype() == dts[k]);
        for (const Tensor& g : gs[k]) BOOST_TEST(g.dtype() == dts[k]);
      }
      BOOST_TEST(allclose(y[0], y[1], 1e-5, 1e-5));
      BOOST_TEST(allclose(gs[0][0], gs[1][0], 1e-4, 1e-5));  // dx
      BOOST_TEST(allclose(gs[0][1], gs[1][1], 1e-4, 1e-4));  // dweight: sums over the rows
      BOOST_TEST(allclose(gs[0][2], gs[1][2], 1e-4, 1e-4));  // dbias
    }
  }
}

BOOST_AUTO_TEST_CASE(matches_the_old_composite_forward) {
  Tensor x = f64(vals(2 * 3 * 16, 31, -2, 2), {2, 3, 16});
  Tensor w = f64(vals(16, 32), {16}), b = f64(vals(16, 33), {16});
  BOOST_TEST(allclose(layer_norm(x, w, b, 1e-5), composite_layer_norm(x, w, b, 1e-5), 1e-13, 1e-14));
}

BOOST_AUTO_TEST_CASE(no_graph_under_no_grad_or_without_grad_inputs) {
  Tensor x = leaf(f64(vals(8, 41), {2, 4}));
  {
    NoGradGuard off;
    Tensor y = layer_norm(x, {}, {});
    BOOST_TEST(!y.requires_grad());
    BOOST_TEST(!y.grad_fn());
  }
  Tensor y = layer_norm(x.detach(), ones({4}, DType::Float64), {});
  BOOST_TEST(!y.requires_grad());
  Tensor y2 = layer_norm(x, {}, {});
  BOOST_TEST(y2.requires_grad());
  BOOST_TEST_REQUIRE(bool(y2.grad_fn()));
  BOOST_TEST(y2.grad_fn()->name() == "layer_norm");
}

// ---------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(fused_backward_matches_differentiable_formulas) {
  // Plain backward takes the fused kernel; create_graph takes the differentiable-op formulas;
  // the old composite (primitive ops) is a third, independent implementation.
  const std::vector<Shape> shapes = {{7}, {4, 7}, {2, 3, 16}, {3, 1}, {2, 130}};
  unsigned seed = 100;
  for (const Shape& s : shapes)
    for (const Affine& a : kAffine) {
      const std::size_t N = s.back();
      BOOST_TEST_CONTEXT(shape_str(s) << " " << a.name) {
        Tensor x = leaf(f64(vals(numel(s), seed++, -3, 3), s));
        Tensor w = a.w ? leaf(f64(vals(N, seed++, 0.5, 1.5), {N})) : Tensor();
        Tensor b = a.b ? leaf(f64(vals(N, seed++), {N})) : Tensor();
        Tensor g = f64(vals(numel(s), seed++), s);
        auto op = [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b); };
        auto old = [](const Tensor& x, const Tensor& w, const Tensor& b) { return composite_layer_norm(x, w, b, 1e-5); };
        auto fused = grads_of(op, x, w, b, g, false);
        auto formulas = grads_of(op, x, w, b, g, true);
        auto composite = grads_of(old, x, w, b, g, false);
        BOOST_TEST_REQUIRE(fused.size() == formulas.size());
        for (std::size_t i = 0; i < fused.size(); ++i) {
          BOOST_TEST_CONTEXT("gradient " << i) {
            BOOST_TEST(allclose(fused[i], formulas[i], 1e-12, 1e-12));
            BOOST_TEST(allclose(fused[i], composite[i], 1e-12, 1e-12));
          }
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(only_requested_gradients_are_computed) {
  Tensor xv = f64(vals(12, 51), {3, 4}), wv = f64(vals(4, 52, 0.5, 1.5), {4}), bv = f64(vals(4, 53), {4});
  Tensor g = f64(vals(12, 54), {3, 4});
  auto op = [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b); };
  Tensor x = leaf(xv), w = leaf(wv), b = leaf(bv);
  auto all = grads_of(op, x, w, b, g, false);  // dx, dw, db
  // Each leaf alone: the same gradient as with all three.
  for (int k = 0; k < 3; ++k) {
    BOOST_TEST_CONTEXT("only input " << k) {
      Tensor xs = k == 0 ? leaf(xv) : xv, ws = k == 1 ? leaf(wv) : wv, bs = k == 2 ? leaf(bv) : bv;
      Tensor y = layer_norm(xs, ws, bs);
      BOOST_TEST(y.requires_grad());
      y.backward(g);
      BOOST_TEST(xs.grad().defined() == (k == 0));
      BOOST_TEST(ws.grad().defined() == (k == 1));
      BOOST_TEST(bs.grad().defined() == (k == 2));
      const Tensor& got = k == 0 ? xs.grad() : k == 1 ? ws.grad() : bs.grad();
      BOOST_TEST(allclose(got, all[std::size_t(k)], 1e-14, 1e-14));
    }
  }
}

BOOST_AUTO_TEST_CASE(hand_derived_gradients) {
  // Without affine, sum(y) = 0 for every x: dx = 0. db = sum of g over rows; dw = sum g * xhat.
  Tensor x = leaf(f64({1, 2, 3, 4, 0, 0, 1, 1}, {2, 4}));
  Tensor w = leaf(f64({1, 1, 1, 1}, {4})), b = leaf(f64({0, 0, 0, 0}, {4}));
  layer_norm(x, {}, {}).backward(ones({2, 4}, DType::Float64));
  BOOST_TEST(allclose(x.grad(), Vec(8, 0.0), 0, 1e-12));
  x.zero_grad();
  Tensor g = f64({1, 0, 0, 0, 0, 0, 0, 2}, {2, 4});
  layer_norm(x, w, b, 1e-5).backward(g);
  const double r0 = 1 / std::sqrt(1.25 + 1e-5), r1 = 1 / std::sqrt(0.25 + 1e-5);
  // xhat row 0: (-1.5, -0.5, 0.5, 1.5) r0; row 1: (-0.5, -0.5, 0.5, 0.5) r1
  BOOST_TEST(allclose(b.grad(), {1, 0, 0, 2}, 0, 1e-15));
  BOOST_TEST(allclose(w.grad(), {-1.5 * r0, 0, 0, 2 * 0.5 * r1}, 1e-12, 1e-15));
  // Row 0, g = e_0: dx = r0 * (e_0 - 1/4 - xhat * xhat_0 / 4).
  const Vec xh0 = {-1.5 * r0, -0.5 * r0, 0.5 * r0, 1.5 * r0};
  Vec dx(8);
  for (std::size_t i = 0; i < 4; ++i) dx[i] = r0 * ((i == 0) - 0.25 - xh0[i] * xh0[0] / 4);
  const Vec xh1 = {-0.5 * r1, -0.5 * r1, 0.5 * r1, 0.5 * r1};
  for (std::size_t i = 0; i < 4; ++i) dx[4 + i] = r1 * (2 * (i == 3) - 0.5 - xh1[i] * 2 * xh1[3] / 4);
  BOOST_TEST(allclose(x.grad(), dx, 1e-12, 1e-13));
}

BOOST_AUTO_TEST_CASE(constant_rows_are_finite) {
  // var = 0: rstd = 1/sqrt(eps), y = bias, gradients finite (fused and formula paths).
  for (DType dt : {DType::Float32, DType::Float64}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tensor x = leaf(tensor({3, 3, 3, 3, 1, -1, 2, 0}, {2, 4}, dt));
      Tensor w = leaf(tensor({1, 2, 3, 4}, {4}, dt)), b = leaf(tensor({0.5, 0, -0.5, 1}, {4}, dt));
      AnomalyModeGuard anomaly;  // throws on the first NaN/inf from finite inputs
      Tensor y = layer_norm(x, w, b);
      auto yv = y.to_vector();
      BOOST_TEST(allclose(tensor(Vec(yv.begin(), yv.begin() + 4), {4}, DType::Float64), {0.5, 0, -0.5, 1}, 0, 0));
      Tensor g = tensor({1, -2, 0.5, 3, 1, 1, 1, 1}, {2, 4}, dt);
      auto fused = grad({y}, {x, w, b}, {g}, GradOptions{true, false, false});
      auto formulas = grad({y}, {x, w, b}, {g}, GradOptions{true, true, false});
      for (std::size_t i = 0; i < 3; ++i) {
        BOOST_TEST(test::all_finite(fused[i]));
        BOOST_TEST(test::all_finite(formulas[i]));
        BOOST_TEST(allclose(fused[i], formulas[i], dt == DType::Float64 ? 1e-12 : 1e-5, 1e-4));
      }
      // Row 0: xhat = 0, so dx = rstd * (gw - mean(gw)) with gw = g * w = (1, -4, 1.5, 12).
      const double rstd = 1 / std::sqrt(dt == DType::Float64 ? 1e-5 : double(float(1e-5)));
      const Vec gw = {1, -4, 1.5, 12};
      const double m = (1 - 4 + 1.5 + 12) / 4;
      auto dx = fused[0].to_vector();
      for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(std::abs(dx[i] - rstd * (gw[i] - m)) <= 1e-5 * rstd * 12);
    }
  }
}

BOOST_AUTO_TEST_CASE(empty_inputs) {
  Tensor x = leaf(f64({}, {0, 4}));
  Tensor w = leaf(f64({1, 2, 3, 4}, {4})), b = leaf(f64({0, 0, 0, 0}, {4}));
  Tensor y = layer_norm(x, w, b);
  BOOST_TEST(shape_str(y.shape()) == "(0, 4)");
  auto gs = grad({y}, {x, w, b}, {f64({}, {0, 4})});
  BOOST_TEST(shape_str(gs[0].shape()) == "(0, 4)");
  BOOST_TEST(allclose(gs[1], {0, 0, 0, 0}, 0, 0));
  BOOST_TEST(allclose(gs[2], {0, 0, 0, 0}, 0, 0));
  Tensor y0 = layer_norm(f64({}, {3, 0}), {}, {});  // zero-length rows
  BOOST_TEST(shape_str(y0.shape()) == "(3, 0)");
}

BOOST_AUTO_TEST_CASE(gradients_accumulate_through_shared_inputs) {
  // The same x and weight in two layer_norms: the engine adds both contributions.
  Tensor x = leaf(f64(vals(6, 61), {2, 3})), w = leaf(f64(vals(3, 62, 0.5, 1.5), {3}));
  Tensor g = f64(vals(6, 63), {2, 3});
  auto one = grad({layer_norm(x, w, {})}, {x, w}, {g});
  add(layer_norm(x, w, {}), layer_norm(x, w, {})).backward(g);
  BOOST_TEST(allclose(x.grad(), mul_scalar(one[0], 2), 1e-14, 1e-14));
  BOOST_TEST(allclose(w.grad(), mul_scalar(one[1], 2), 1e-14, 1e-14));
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bad_arguments_throw_documented_errors) {
  const Tensor x = f64(vals(8, 71), {2, 4}), w = f64(Vec(4, 1.0), {4}), b = f64(Vec(4, 0.0), {4});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  check_throws<ValueError>("ValueError", [&] { layer_norm(Tensor(), w, b); }, {"'x'", "undefined"});
  check_throws<DTypeError>("DTypeError", [&] { layer_norm(index_tensor({1, 2, 3, 4}, {4}), {}, {}); },
                           {"'x'", "int64", "(4)"});
  check_throws<DTypeError>("DTypeError", [&] { layer_norm(bool_tensor({true, false}, {2}), {}, {}); }, {"'x'", "bool"});
  check_throws<ShapeError>("ShapeError", [&] { layer_norm(scalar(2.0, DType::Float64), {}, {}); }, {"'x'", "()"});
  // weight / bias shapes
  check_throws<ShapeError>("ShapeError", [&] { layer_norm(x, f64({1, 1, 1}, {3}), b); },
                           {"'weight'", "(3)", "(4)", "'x'", "(2, 4)"});
  check_throws<ShapeError>("ShapeError", [&] { layer_norm(x, f64(Vec(4, 1.0), {1, 4}), b); },
                           {"'weight'", "(1, 4)", "'x'", "(2, 4)"});
  check_throws<ShapeError>("ShapeError", [&] { layer_norm(x, w, f64(Vec(8, 0.0), {2, 4})); },
                           {"'bias'", "(2, 4)", "(4)", "'x'"});
  check_throws<ShapeError>("ShapeError", [&] { layer_norm(x, {}, scalar(0.0, DType::Float64)); },
                           {"'bias'", "()", "(4)"});
  // weight / bias dtypes
  check_throws<DTypeError>("DTypeError", [&] { layer_norm(x, w.to(DType::Float32), b); },
                           {"'weight'", "float32", "'x'", "float64"});
  check_throws<DTypeError>("DTypeError", [&] { layer_norm(x.to(DType::Float32), {}, b); },
                           {"'bias'", "float64", "'x'", "float32"});
  check_throws<DTypeError>("DTypeError", [&] { layer_norm(x, index_tensor({1, 1, 1, 1}, {4}), {}); },
                           {"'weight'", "int64"});
  // eps
  for (double eps : {0.0, -1e-5, nan})
    BOOST_TEST_CONTEXT("eps " << eps) {
      check_throws<ValueError>("ValueError", [&] { layer_norm(x, w, b, eps); }, {"eps", "(2, 4)"});
    }
  // The layer: x whose last dim is not the layer's size.
  LayerNorm ln(4);
  check_throws<ShapeError>("ShapeError", [&] { ln.forward(f32(Vec(15, 1.0), {3, 5})); },
                           {"'x'", "(3, 5)", "(4)"});
}

BOOST_AUTO_TEST_SUITE_END()
