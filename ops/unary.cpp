// Elementwise functions. y = f(x), dx = g * f'(x), with f' written in xgrad ops so that
// it can be differentiated again.
#include <cmath>
#include <type_traits>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/fastmath.hpp"
#include "xgrad/ops/isa.hpp"
#include "xgrad/ops/unary.hpp"

namespace xgrad {
namespace {

using detail::map_float;

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

// float32 GELU kernels: fastmath's vectorised exp / erfc instead of libm's scalar erff and
// expf (see ops/fastmath.hpp for their accuracy), one variant per CPU path (ops/isa.hpp).
// float64 keeps std::erf and std::exp.
XGRAD_FASTMATH_INLINE void gelu_f32_body(const float* __restrict x, float* __restrict y, std::size_t n) {
  const std::size_t m = fastmath::vector_prefix(n);
  for (std::size_t i = 0; i < m; ++i) y[i] = fastmath::fast_gelu(x[i]);
  for (std::size_t i = m; i < n; ++i) y[i] = fastmath::fast_gelu(x[i]);
}
XGRAD_ISA_KERNEL(gelu_f32, (const float* __restrict x, float* __restrict y, std::size_t n), (x, y, n))

XGRAD_FASTMATH_INLINE void gelu_and_slope_f32_body(const float* __restrict x, float* __restrict y,
                                                   float* __restrict dy, std::size_t n) {
  const std::size_t m = fastmath::vector_prefix(n);
  for (std::size_t i = 0; i < m; ++i) fastmath::fast_gelu_and_grad(x[i], y[i], dy[i]);
  for (std::size_t i = m; i < n; ++i) fastmath::fast_gelu_and_grad(x[i], y[i], dy[i]);
}
XGRAD_ISA_KERNEL(gelu_and_slope_f32,
                 (const float* __restrict x, float* __restrict y, float* __restrict dy, std::size_t n),
                 (x, y, dy, n))

XGRAD_FASTMATH_INLINE void gelu_backward_f32_body(const float* __restrict x, const float* __restrict g,
                                                  float* __restrict dx, std::size_t n) {
  const std::size_t m = fastmath::vector_prefix(n);
  for (std::size_t i = 0; i < m; ++i) dx[i] = g[i] * fastmath::fast_gelu_grad(x[i]);
  for (std::size_t i = m; i < n; ++i) dx[i] = g[i] * fastmath::fast_gelu_grad(x[i]);
}
XGRAD_ISA_KERNEL(gelu_backward_f32,
                 (const float* __restrict x, const float* __restrict g, float* __restrict dx, std::size_t n),
                 (x, g, dx, n))

// The float64 path's two GELU factors, with std::erf / std::exp:
// Phi(v) = (1 + erf(v / sqrt 2)) / 2 and phi(v) = exp(-v^2 / 2) / sqrt(2 pi).
template <class T> T gelu_cdf(T v) { return T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2))); }
template <class T> T gelu_pdf(T v) { return std::exp(T(-0.5) * v * v) * T(kInvSqrt2Pi); }

// Exact GELU at v, its slope in s: Phi(v) + v phi(v).
template <class T> T gelu_exact_and_slope(T v, T& s) {
  const T Phi = gelu_cdf(v);
  s = Phi + v * gelu_pdf(v);
  return v * Phi;
}

// Tanh GELU at v, its slope in s (ops/unary.hpp): t = tanh(c (v + a v^3)),
// y = v (1 + t) / 2, s = (1 + t) / 2 + v (1 - t^2) c (1 + 3 a v^2) / 2. Where t is +-1 exactly
// (|u| > ~9 in float32, ~19 in float64) the second term is 0: taken as 0, not as 0 times the
// v^2 that overflows for |v| >~ 1e19 (float32), which gave NaN.
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluTanhA = 0.044715;
template <class T> T gelu_tanh_and_slope(T v, T& s) {
  const T c = T(kSqrt2OverPi), a = T(kGeluTanhA), v2 = v * v;
  const T t = std::tanh(c * (v + a * v2 * v));
  const T half_1pt = T(0.5) * (T(1) + t), sech2 = T(1) - t * t;
  s = sech2 == T(0) ? half_1pt : half_1pt + T(0.5) * v * sech2 * c * (T(1) + T(3) * a * v2);
  return v * half_1pt;
}

// gelu''(x) in xgrad ops (differentiable again), see gelu_backward. x^2 enters the factors that
// multiply phi(x) or 1 - t^2 clamped to 1e4: where it is larger those are exactly 0 (|x| > 100),
// and an x^2 that overflows (|x| >~ 1e19 in float32) made 0 times inf = NaN there.
Tensor gelu_second_derivative(const Tensor& x, GeluApproximation approximate) {
  const Tensor x2 = clamp(mul(x, x), std::nullopt, 1e4);
  if (approximate == GeluApproximation::None)
    return mul(mul_scalar(exp(mul_scalar(x2, -0.5)), kInvSqrt2Pi), add_scalar(neg(x2), 2.0));
  const Tensor u = mul_scalar(add(x, mul_scalar(mul(mul(x, x), x), kGeluTanhA)), kSqrt2OverPi);
  const Tensor du = mul_scalar(add_scalar(mul_scalar(x2, 3 * kGeluTanhA), 1.0), kSqrt2OverPi);
  const Tensor d2u = mul_scalar(x, 6 * kGeluTanhA * kSqrt2OverPi);
  const Tensor t = tanh(u);
  const Tensor sech2 = add_scalar(neg(mul(t, t)), 1.0);
  return add(mul(sech2, du), mul(mul_scalar(mul(x, sech2), 0.5), sub(d2u, mul_scalar(mul(t, mul(du, du)), 2.0))));
}

}  // namespace

// dx = g * y
Tensor exp(const Tensor& x) {
  Tensor y = map_float("exp", x, [](auto v) { return std::exp(v); });
  return record("exp", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {mul(g, n.output())};
  });
}

// dx = g / x
Tensor log(const Tensor& x) {
  Tensor y = map_float("log", x, [](auto v) { return std::log(v); });
  return record("log", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {div(g, n.input(0))};
  });
}

// dx = g * 0.5 / y
Tensor sqrt(const Tensor& x) {
  Tensor y = map_float("sqrt", x, [](auto v) { return std::sqrt(v); });
  return record("sqrt", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {div(mul_scalar(g, 0.5), n.output())};
  });
}

// y = x^(-1/2);  dx = g * (-0.5) * y^3
Tensor rsqrt(const Tensor& x) {
  Tensor y = map_float("rsqrt", x, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
  return record("rsqrt", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    Tensor y = n.output();
    return {mul(g, mul_scalar(mul(y, mul(y, y)), -0.5))};
  });
}

// dx = g * (1 - y^2)
Tensor tanh(const Tensor& x) {
  Tensor y = map_float("tanh", x, [](auto v) { return std::tanh(v); });
  return record("tanh", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    Tensor y = n.output();
    return {sub(g, mul(g, mul(y, y)))};
  });
}

// y = 1 / (1 + e^-x);  dx = g * y * (1 - y)
Tensor sigmoid(const Tensor& x) {
  Tensor y = map_float("sigmoid", x, [](auto v) {
    using T = decltype(v);
    return T(1) / (T(1) + std::exp(-v));
  });
  return record("sigmoid", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    Tensor y = n.output();
    return {mul(mul(g, y), add_scalar(neg(y), 1.0))};
  });
}

// y = x where !(x <= 0) (x > 0 or NaN: a NaN passes, as in torch.relu), else 0
// dx = g * [!(x <= 0)]   (a constant: relu'' = 0 almost everywhere)
Tensor relu(const Tensor& x) {
  Tensor y = map_float("relu", x, [](auto v) { return !(v <= 0) ? v : decltype(v)(0); });
  return record("relu", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    Tensor step = map_float("relu", n.input(0), [](auto v) {
      using T = decltype(v);
      return !(v <= T(0)) ? T(1) : T(0);
    });
    return {mul(g, step)};
  });
}

// dx = g * 2/sqrt(pi) * exp(-x^2)
Tensor erf(const Tensor& x) {
  Tensor y = map_float("erf", x, [](auto v) { return std::erf(v); });
  return record("erf", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor& x = n.input(0);
    return {mul(g, mul_scalar(exp(neg(mul(x, x))), kTwoOverSqrtPi))};
  });
}

// y = |x|;  dx = g * sign(x)   (sign(0) = 0; a constant: abs'' = 0 away from 0)
Tensor abs(const Tensor& x) {
  Tensor y = map_float("abs", x, [](auto v) { return std::abs(v); });
  return record("abs", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    Tensor sign = map_float("abs", n.input(0), [](auto v) {
      using T = decltype(v);
      return v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
    });
    return {mul(g, sign)};
  });
}

// y = min(max(x, lo), hi), a missing bound +-inf;  dx = g * [lo <= x <= hi]  (a constant mask)
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_float("clamp", "x", x);
  if (!min && !max) throw_error<ValueError>("clamp", "at least one of 'min' and 'max' must be given");
  if (min && std::isnan(*min)) throw_error<ValueError>("clamp", "argument 'min' is NaN");
  if (max && std::isnan(*max)) throw_error<ValueError>("clamp", "argument 'max' is NaN");
  const double lo = min ? *min : -INFINITY, hi = max ? *max : INFINITY;
  Tensor y = dispatch_float("clamp", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    Tensor out = empty_tensor<T>(x.shape(), "clamp");
    T* po = fresh_data<T>(out);
    for (std::size_t i = 0, count = x.numel(); i < count; ++i) {
      T v = px[i];
      if (v < T(lo)) v = T(lo);
      if (v > T(hi)) v = T(hi);  // after lo: min > max gives max everywhere; NaN stays NaN
      po[i] = v;
    }
    return out;
  });
  return record("clamp", y, {x}, [lo, hi](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    Tensor pass = map_float("clamp", n.input(0), [lo, hi](auto v) {
      using T = decltype(v);
      return v >= T(lo) && v <= T(hi) ? T(1) : T(0);
    });
    return {mul(g, pass)};
  });
}

// Exact (GeluApproximation::None):
//   y = x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2
//   dx = g * (Phi(x) + x * phi(x)),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// Tanh: with u = c (x + a x^3), c = sqrt(2 / pi), a = 0.044715, t = tanh(u):
//   y = x (1 + t) / 2
//   dx = g * ((1 + t) / 2 + x (1 - t^2) u' / 2),  u' = c (1 + 3 a x^2)
// When the output is recorded the forward also keeps the slope dy/dx (same intermediate
// values, one more array), so a first-order backward is one multiply, dx = g * slope, instead
// of a second erf and exp (or tanh) per element (record_fused's first-order backward). Under
// create_graph the backward is gelu_backward(x, g, approximate), differentiable again.
Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  check_float("gelu", "x", x);
  const bool keep_slope = will_record(x);
  const bool exact = approximate == GeluApproximation::None;
  Tensor slope;
  Tensor y = dispatch_float("gelu", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    Tensor out = empty_tensor<T>(x.shape(), "gelu");
    if (keep_slope) slope = empty_tensor<T>(x.shape(), "gelu");
    T* po = fresh_data<T>(out);
    T* pdy = keep_slope ? fresh_data<T>(slope) : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (exact && keep_slope) gelu_and_slope_f32(px, po, pdy, x.numel());
      else if (exact) gelu_f32(px, po, x.numel());
    }
    if (!exact || !std::is_same_v<T, float>) {
      for (std::size_t i = 0, count = x.numel(); i < count; ++i) {
        const T v = px[i];
        T s;
        po[i] = exact ? gelu_exact_and_slope(v, s) : gelu_tanh_and_slope(v, s);
        if (keep_slope) pdy[i] = s;
      }
    }
    return out;
  });
  auto differentiable = [approximate](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {gelu_backward(n.input(0), g, approximate)};
  };
  if (!keep_slope) return record("gelu", y, {x}, differentiable);  // records nothing (no input needs grad)
  return record_fused("gelu", y, {x},
                      [slope](const Node&, const Tensor& g) -> std::vector<Tensor> { return {mul(g, slope)}; },
                      differentiable);
}

Tensor gelu(const Tensor& x) { return gelu(x, GeluApproximation::None); }

// dx = g * gelu'(x);  with upstream U:
//   d/dg = gelu_backward(x, U);   d/dx = U * g * gelu''(x)
//   exact: gelu'' = phi(x) (2 - x^2)
//   tanh:  gelu'' = (1 - t^2) u' + x (1 - t^2) (u'' - 2 t u'^2) / 2,  u'' = 6 a c x
Tensor gelu_backward(const Tensor& x, const Tensor& g, GeluApproximation approximate) {
  check_same_float("gelu_backward", "x", x, "g", g);
  check_same_shape("gelu_backward", "x", x, "g", g);
  const bool exact = approximate == GeluApproximation::None;
  Tensor dx = dispatch_float("gelu_backward", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    const T* pg = data_of<T>(g);
    Tensor out = empty_tensor<T>(x.shape(), "gelu_backward");
    T* po = fresh_data<T>(out);
    if constexpr (std::is_same_v<T, float>) {
      if (exact) gelu_backward_f32(px, pg, po, x.numel());
    }
    if (!exact || !std::is_same_v<T, float>) {
      for (std::size_t i = 0, count = x.numel(); i < count; ++i) {
        T s;
        if (exact) gelu_exact_and_slope(px[i], s);
        else gelu_tanh_and_slope(px[i], s);
        po[i] = pg[i] * s;
      }
    }
    return out;
  });
  return record("gelu_backward", dx, {x, g}, [approximate](const Node& n, const Tensor& u) -> std::vector<Tensor> {
    const Tensor &x = n.input(0), &g = n.input(1);
    Tensor dxx;
    if (n.needs_grad(0)) dxx = mul(mul(u, g), gelu_second_derivative(x, approximate));
    return {dxx, n.needs_grad(1) ? gelu_backward(x, u, approximate) : Tensor()};
  });
}

Tensor gelu_backward(const Tensor& x, const Tensor& g) { return gelu_backward(x, g, GeluApproximation::None); }

// --- registration ----------------------------------------------------------------------
namespace {
std::vector<OpSample> samples(Rng& rng, double lo, double hi) {
  return {{"(2,3)", {sample_uniform({2, 3}, lo, hi, rng)}},
          {"(4)", {sample_uniform({4}, lo, hi, rng)}},
          {"scalar", {sample_uniform({}, lo, hi, rng)}},
          {"empty (0,3)", {sample_uniform({0, 3}, lo, hi, rng)}, true}};
}
// relu's kink at 0 breaks central differences: keep samples away from it.
std::vector<OpSample> relu_samples(Rng& rng) {
  Tensor x = tensor({-1.5, -0.7, -0.2, 0.3, 0.9, 1.7}, {2, 3}, DType::Float64);
  x.set_requires_grad(true);
  return {{"(2,3) both signs", {x}}, {"empty (0,3)", {sample_uniform({0, 3}, 0.1, 1, rng)}, true}};
}
// |x| in [0.1, 2] with random signs: no value near abs's or clamp's kinks (0, and the
// bounds -0.5, 0, 0.3, 0.8 used below, at least 0.05 away); the first element is 0.15.
std::vector<OpSample> kink_free_samples(Rng& rng) {
  auto draw = [&rng](const Shape& shape) {
    std::vector<double> v(numel(shape));
    for (auto& e : v) {
      do e = rng.uniform(-2, 2);
      while (std::abs(e) < 0.1 || std::abs(e + 0.5) < 0.05 || std::abs(e - 0.3) < 0.05 || std::abs(e - 0.8) < 0.05);
    }
    if (!v.empty()) v[0] = 0.15;  // inside every clamp range below: never an all-zero gradient
    Tensor x = tensor(v, shape, DType::Float64);
    x.set_requires_grad(true);
    return x;
  };
  return {{"(3,4)", {draw({3, 4})}}, {"(5)", {draw({5})}}, {"scalar", {draw({})}},
          {"empty (0,3)", {sample_uniform({0, 3}, 0.1, 1, rng)}, true}};
}
}  // namespace

XGRAD_REGISTER_OP({"abs", [](const auto& x) { return abs(x[0]); }, kink_free_samples});
XGRAD_REGISTER_OP({"clamp(-0.5, 0.8)", [](const auto& x) { return clamp(x[0], -0.5, 0.8); }, kink_free_samples});
XGRAD_REGISTER_OP({"clamp(min 0)", [](const auto& x) { return clamp_min(x[0], 0.0); }, kink_free_samples});
XGRAD_REGISTER_OP({"clamp(max 0.3)", [](const auto& x) { return clamp_max(x[0], 0.3); }, kink_free_samples});
XGRAD_REGISTER_OP({"exp", [](const auto& x) { return exp(x[0]); },
                   [](Rng& r) { return samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"log", [](const auto& x) { return log(x[0]); },
                   [](Rng& r) { return samples(r, 0.5, 3); }});
XGRAD_REGISTER_OP({"sqrt", [](const auto& x) { return sqrt(x[0]); },
                   [](Rng& r) { return samples(r, 0.5, 3); }});
XGRAD_REGISTER_OP({"rsqrt", [](const auto& x) { return rsqrt(x[0]); },
                   [](Rng& r) { return samples(r, 0.5, 3); }});
XGRAD_REGISTER_OP({"tanh", [](const auto& x) { return tanh(x[0]); },
                   [](Rng& r) { return samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"sigmoid", [](const auto& x) { return sigmoid(x[0]); },
                   [](Rng& r) { return samples(r, -3, 3); }});
XGRAD_REGISTER_OP({"relu", [](const auto& x) { return relu(x[0]); }, relu_samples});
XGRAD_REGISTER_OP({"erf", [](const auto& x) { return erf(x[0]); },
                   [](Rng& r) { return samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"gelu", [](const auto& x) { return gelu(x[0]); },
                   [](Rng& r) { return samples(r, -3, 3); }});
XGRAD_REGISTER_OP({"gelu_backward", [](const auto& x) { return gelu_backward(x[0], x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3)", {sample_uniform({2, 3}, -3, 3, r), sample_randn({2, 3}, r)}}};
                   }});
XGRAD_REGISTER_OP({"gelu(tanh)", [](const auto& x) { return gelu(x[0], GeluApproximation::Tanh); },
                   [](Rng& r) { return samples(r, -3, 3); }});
XGRAD_REGISTER_OP({"gelu_backward(tanh)",
                   [](const auto& x) { return gelu_backward(x[0], x[1], GeluApproximation::Tanh); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3)", {sample_uniform({2, 3}, -3, 3, r), sample_randn({2, 3}, r)}}};
                   }});

}  // namespace xgrad
