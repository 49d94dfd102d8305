// ops/fastmath.hpp (float32 exp / erf / GELU pieces) against double std::exp / std::erf /
// std::erfc on dense grids and special values, with the error bounds stated in the header;
// and the float32 gelu / gelu_backward ops (which run the same code, compiled for the CPU's
// vector extensions) against a double reference.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/fastmath.hpp"
#include "xgrad/ops/unary.hpp"


using namespace xgrad;
namespace fm = xgrad::fastmath;

namespace {

// The bounds asserted here are the "tested" bounds of the header comment.
constexpr double kExpMaxUlp = 1.5;         // where e^x is a normal float
constexpr double kErfMaxAbs = 1.2e-7;      // everywhere
constexpr double kErfSmallMaxUlp = 2.0;    // |x| < 1
constexpr double kCdfMaxRel = 8e-7;        // gelu_parts' Phi, where Phi is a normal float
constexpr double kGeluMaxRel = 1e-6;       // float32 gelu / gelu_backward (see below)

constexpr double kFltMin = 1.1754943508222875e-38;  // smallest normal float
constexpr double kSubStep = 1.401298464324817e-45;  // subnormal spacing, 2^-149
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Spacing of floats at |v| (v a normal-range magnitude).
double ulp_at(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e);  // |v| = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 24);
}
// n evenly spaced values over [lo, hi], as floats.
std::vector<float> grid(double lo, double hi, std::size_t n) {
  std::vector<float> v;
  v.reserve(n + 4);
  for (std::size_t i = 0; i < n; ++i) v.push_back(float(lo + (hi - lo) * double(i) / double(n - 1)));
  return v;
}
// Magnitudes spread over every binade from the smallest subnormal up to hi, both signs.
std::vector<float> log_grid(double hi, std::size_t per_binade) {
  std::vector<float> v;
  for (double m = kSubStep; m < hi; m *= 2)
    for (std::size_t k = 0; k < per_binade; ++k) {
      const float x = float(m * (1 + double(k) / double(per_binade)));
      v.push_back(x);
      v.push_back(-x);
    }
  return v;
}
bool same_bits(float a, float b) {
  std::uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}
double ref_cdf(double x) { return 0.5 * std::erfc(-x * kInvSqrt2); }

}  // namespace

BOOST_AUTO_TEST_SUITE(fastmath)

BOOST_AUTO_TEST_CASE(expf_dense_grid) {
  std::vector<float> xs = grid(-110, 90, 2'000'000);
  for (float x : {-87.336544f, -87.33655f, 88.72283f, 88.7228394f, -103.97f, -103.98f, -104.0f})
    xs.push_back(x);
  double worst_ulp = 0, worst_sub = 0;
  float at_ulp = 0, at_sub = 0;
  std::size_t bad_zero = 0, bad_inf = 0;
  for (float x : xs) {
    const float y = fm::fast_expf(x);
    const double ref = std::exp(double(x));
    if (ref > double(std::numeric_limits<float>::max()) * (1 + 0x1p-25)) {  // rounds to +inf
      bad_inf += !(std::isinf(y) && y > 0);
    } else if (x < -103.98f) {  // below half the smallest subnormal
      bad_zero += !(y == 0);
    } else if (ref >= kFltMin) {
      const double u = std::fabs(double(y) - ref) / ulp_at(ref);
      if (u > worst_ulp) worst_ulp = u, at_ulp = x;
    } else {
      const double s = std::fabs(double(y) - ref) / kSubStep;
      if (s > worst_sub) worst_sub = s, at_sub = x;
    }
  }
  BOOST_TEST_MESSAGE("fast_expf: max " << worst_ulp << " ulp at x = " << at_ulp << "; subnormal results max "
                                       << worst_sub << " steps at x = " << at_sub);
  BOOST_TEST(worst_ulp <= kExpMaxUlp, "max " << worst_ulp << " ulp at x = " << at_ulp);
  BOOST_TEST(worst_sub <= 1.0, "subnormal result off by " << worst_sub << " steps at x = " << at_sub);
  BOOST_TEST(bad_zero == 0u);
  BOOST_TEST(bad_inf == 0u);
}

BOOST_AUTO_TEST_CASE(expf_special_values) {
  BOOST_TEST(fm::fast_expf(0.0f) == 1.0f);
  BOOST_TEST(fm::fast_expf(-0.0f) == 1.0f);
  BOOST_TEST(fm::fast_expf(1e-10f) == 1.0f);
  BOOST_TEST(fm::fast_expf(-1e-10f) == 1.0f);
  BOOST_TEST(fm::fast_expf(1e-40f) == 1.0f);  // subnormal argument
  BOOST_TEST(fm::fast_expf(-kInfF) == 0.0f);
  BOOST_TEST(!std::signbit(fm::fast_expf(-kInfF)));
  BOOST_TEST(fm::fast_expf(-104.0f) == 0.0f);
  BOOST_TEST(fm::fast_expf(-1e30f) == 0.0f);
  BOOST_TEST(fm::fast_expf(-std::numeric_limits<float>::max()) == 0.0f);
  BOOST_TEST(fm::fast_expf(-103.9f) == float(kSubStep));  // e^-103.9 = 0.53 * 2^-149
  BOOST_TEST(std::isinf(fm::fast_expf(kInfF)));
  BOOST_TEST(std::isinf(fm::fast_expf(88.7229f)));
  BOOST_TEST(std::isinf(fm::fast_expf(1e30f)));
  BOOST_TEST(std::isinf(fm::fast_expf(std::numeric_limits<float>::max())));
  BOOST_TEST(std::isfinite(fm::fast_expf(88.72283f)));
  BOOST_TEST(std::isnan(fm::fast_expf(kNaNF)));
  BOOST_TEST(std::isnan(fm::fast_expf(-kNaNF)));
  BOOST_TEST(std::fabs(fm::fast_expf(1.0f) - 2.718281828459045) <= ulp_at(2.718281828459045));
  // The array helpers give the scalar results, bit for bit, in the vector part and the rest.
  std::vector<float> in = grid(-20, 20, 53), out(in.size()), inplace = in;
  fm::exp_array(in.data(), out.data(), in.size());
  fm::exp_inplace(inplace.data(), inplace.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    BOOST_TEST(same_bits(out[i], fm::fast_expf(in[i])));
    BOOST_TEST(same_bits(inplace[i], fm::fast_expf(in[i])));
  }
}

// The softmax's exp of shifted scores: fast_expf's bits on [-87, 0] (every float there with the
// sign bit set, in steps of 4,099 patterns, and the ends; every pattern was compared once, offline), NaN propagated.
BOOST_AUTO_TEST_CASE(expf_nonpositive_matches_fast_expf) {
  std::vector<float> xs{0.0f, -0.0f, -87.0f, -1e-40f, -std::numeric_limits<float>::denorm_min()};
  for (std::uint32_t u = 0x80000000u; u <= 0xc2ae0000u; u += 4099) {  // -0 down to -87
    float x;
    std::memcpy(&x, &u, 4);
    xs.push_back(x);
  }
  std::size_t differ = 0;
  for (float x : xs) differ += !same_bits(fm::fast_expf_nonpositive(x), fm::fast_expf(x));
  BOOST_TEST(differ == 0u, differ << " of " << xs.size() << " differ");
  BOOST_TEST(std::isnan(fm::fast_expf_nonpositive(kNaNF)));
  BOOST_TEST(std::isnan(fm::fast_expf_nonpositive(-kNaNF)));
}

BOOST_AUTO_TEST_CASE(erff_dense_grid) {
  std::vector<float> xs = grid(-10, 10, 2'000'000);
  for (float x : log_grid(1.0, 64)) xs.push_back(x);  // tiny and subnormal magnitudes
  double worst_abs = 0, worst_small_ulp = 0, worst_sub = 0;
  float at_abs = 0, at_small = 0, at_sub = 0;
  std::size_t bad_sat = 0, bad_odd = 0;
  for (float x : xs) {
    const float y = fm::fast_erff(x);
    const double ref = std::erf(double(x));
    const double err = std::fabs(double(y) - ref);
    if (err > worst_abs) worst_abs = err, at_abs = x;
    if (std::fabs(ref) >= kFltMin && std::fabs(x) < 1) {
      const double u = err / ulp_at(ref);
      if (u > worst_small_ulp) worst_small_ulp = u, at_small = x;
    } else if (std::fabs(ref) < kFltMin) {
      if (err / kSubStep > worst_sub) worst_sub = err / kSubStep, at_sub = x;
    }
    if (std::fabs(x) >= 3.92f) bad_sat += !(std::fabs(y) == 1.0f);
    bad_odd += !same_bits(fm::fast_erff(-x), -y);
  }
  BOOST_TEST_MESSAGE("fast_erff: max abs " << worst_abs << " at x = " << at_abs << "; |x| < 1: max "
                                           << worst_small_ulp << " ulp at x = " << at_small);
  BOOST_TEST(worst_abs <= kErfMaxAbs, "max abs error " << worst_abs << " at x = " << at_abs);
  BOOST_TEST(worst_small_ulp <= kErfSmallMaxUlp, "max " << worst_small_ulp << " ulp at x = " << at_small);
  BOOST_TEST(worst_sub <= 1.0, "subnormal result off by " << worst_sub << " steps at x = " << at_sub);
  BOOST_TEST(bad_sat == 0u);
  BOOST_TEST(bad_odd == 0u);
}

BOOST_AUTO_TEST_CASE(erff_special_values) {
  BOOST_TEST(same_bits(fm::fast_erff(0.0f), 0.0f));
  BOOST_TEST(same_bits(fm::fast_erff(-0.0f), -0.0f));
  // Tiny x: erf(x) = 2x / sqrt(pi) to within an ulp (relative), subnormals to within a step.
  for (float x : {1e-30f, -3e-20f, 1e-10f, 2e-38f}) {
    const double ref = 1.1283791670955126 * double(x);
    BOOST_TEST(std::fabs(fm::fast_erff(x) - ref) <= ulp_at(ref), "x = " << x);
  }
  for (float x : {1e-40f, -1e-42f, float(kSubStep)}) {
    const double ref = 1.1283791670955126 * double(x);
    BOOST_TEST(std::fabs(fm::fast_erff(x) - ref) <= kSubStep, "x = " << x);
  }
  BOOST_TEST(fm::fast_erff(4.0f) == 1.0f);
  BOOST_TEST(fm::fast_erff(-4.0f) == -1.0f);
  BOOST_TEST(fm::fast_erff(1e30f) == 1.0f);
  BOOST_TEST(fm::fast_erff(-std::numeric_limits<float>::max()) == -1.0f);
  BOOST_TEST(fm::fast_erff(kInfF) == 1.0f);
  BOOST_TEST(fm::fast_erff(-kInfF) == -1.0f);
  BOOST_TEST(std::isnan(fm::fast_erff(kNaNF)));
  std::vector<float> in = grid(-5, 5, 41), out(in.size());
  fm::erf_array(in.data(), out.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) BOOST_TEST(same_bits(out[i], fm::fast_erff(in[i])));
}

BOOST_AUTO_TEST_CASE(gelu_parts_dense_grid) {
  // Phi(x) with relative accuracy in both tails; gauss = e^(-x^2/2).
  std::vector<float> xs = grid(-20, 20, 1'000'000);
  for (float x : log_grid(1.0, 16)) xs.push_back(x);
  double worst_cdf = 0, worst_gauss = 0, worst_sub = 0;
  float at_cdf = 0, at_gauss = 0, at_sub = 0;
  for (float x : xs) {
    float cdf = 0, gauss = 0;
    fm::gelu_parts(x, cdf, gauss);
    const double c = ref_cdf(x), g = std::exp(-0.5 * double(x) * double(x));
    if (c >= kFltMin) {
      const double r = std::fabs(cdf - c) / c;
      if (r > worst_cdf) worst_cdf = r, at_cdf = x;
    } else if (std::fabs(cdf - c) / kSubStep > worst_sub) {
      worst_sub = std::fabs(cdf - c) / kSubStep, at_sub = x;
    }
    if (g >= kFltMin) {
      const double r = std::fabs(gauss - g) / g;
      if (r > worst_gauss) worst_gauss = r, at_gauss = x;
    }
  }
  BOOST_TEST_MESSAGE("gelu_parts: Phi max rel " << worst_cdf << " at x = " << at_cdf << "; gauss max rel "
                                                << worst_gauss << " at x = " << at_gauss);
  BOOST_TEST(worst_cdf <= kCdfMaxRel, "Phi: max rel " << worst_cdf << " at x = " << at_cdf);
  BOOST_TEST(worst_gauss <= 3e-7, "gauss: max rel " << worst_gauss << " at x = " << at_gauss);
  BOOST_TEST(worst_sub <= 8.0, "Phi subnormal: off by " << worst_sub << " steps at x = " << at_sub);
}

// The float32 ops (vectorised kernels, as dispatched for this CPU) against double references
// computed with std::erfc / std::exp (erfc rather than 1 + erf, which cancels in double too far
// out in the left tail):
//   gelu:          |y - ref| <= 1e-6 |ref|, or |y - ref| <= 1e-42 (results at the bottom of
//                  the normal range and below, x < -13, go through a subnormal Phi)
//   gelu_backward: |dx - ref| <= 1e-6 |g| (Phi + |x| phi) (or <= 1e-42): relative to the size of
//                  the two terms, which cancel where gelu' crosses zero (x = -0.7518).
BOOST_AUTO_TEST_CASE(gelu_float32_against_double) {
  std::vector<float> xs = grid(-16, 16, 400'001);
  for (float x : log_grid(1.0, 8)) xs.push_back(x);
  xs.push_back(12345.0f);  // an odd count too: the kernels' scalar remainder is covered
  std::vector<double> xd(xs.begin(), xs.end()), gd(xs.size());
  for (std::size_t i = 0; i < gd.size(); ++i) gd[i] = double(float(std::sin(0.37 * double(i)) * 2.0));
  const Shape shape{xs.size()};
  Tensor x = tensor(xd, shape, DType::Float32), g = tensor(gd, shape, DType::Float32);
  Tensor y = gelu(x), dx = gelu_backward(x, g);
  BOOST_TEST(y.dtype() == DType::Float32);
  BOOST_TEST(dx.dtype() == DType::Float32);
  const std::vector<double> yv = y.to_vector(), dxv = dx.to_vector();
  double worst_y = 0, worst_dx = 0;
  double at_y = 0, at_dx = 0;
  for (std::size_t i = 0; i < xd.size(); ++i) {
    const double v = xd[i], cdf = ref_cdf(v), pdf = std::exp(-0.5 * v * v) * kInvSqrt2Pi;
    const double ry = v * cdf;
    const double ey = std::fabs(yv[i] - ry) / (std::fabs(ry) + 1e-38);
    if (std::fabs(yv[i] - ry) > 1e-42 && ey > worst_y) worst_y = ey, at_y = v;
    const double rdx = gd[i] * (cdf + v * pdf), scale = std::fabs(gd[i]) * (cdf + std::fabs(v) * pdf);
    const double edx = std::fabs(dxv[i] - rdx) / (scale + 1e-38);
    if (std::fabs(dxv[i] - rdx) > 1e-42 && edx > worst_dx) worst_dx = edx, at_dx = v;
  }
  BOOST_TEST_MESSAGE("float32 gelu: max rel " << worst_y << " at x = " << at_y << "; gelu_backward: max "
                                              << worst_dx << " at x = " << at_dx);
  BOOST_TEST(worst_y <= kGeluMaxRel, "gelu: max rel error " << worst_y << " at x = " << at_y);
  BOOST_TEST(worst_dx <= kGeluMaxRel, "gelu_backward: max scaled error " << worst_dx << " at x = " << at_dx);
}

// gelu keeps its slope when recorded: a first-order backward is g * slope, which must be the
// very numbers gelu_backward gives (and create_graph's differentiable path too); the output
// does not depend on whether the slope was kept.
BOOST_AUTO_TEST_CASE(gelu_saved_slope_matches_gelu_backward_bit_for_bit) {
  std::vector<double> xs;
  for (float x : grid(-12, 12, 20'001)) xs.push_back(x);
  xs.push_back(std::numeric_limits<double>::infinity());
  xs.push_back(-1e30);
  for (DType dt : {DType::Float32, DType::Float64}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      std::vector<double> gv(xs.size());
      for (std::size_t i = 0; i < gv.size(); ++i) gv[i] = std::cos(0.71 * double(i)) * 3.0;
      const Shape shape{xs.size()};
      Tensor x = tensor(xs, shape, dt), g = tensor(gv, shape, dt);
      x.set_requires_grad(true);
      Tensor y = gelu(x);
      const std::vector<double> dx_saved = grad({y}, {x}, {g})[0].to_vector();
      const std::vector<double> dx_ref = gelu_backward(x.detach(), g).to_vector();
      Tensor y2 = gelu(x);
      const std::vector<double> dx_graph = grad({y2}, {x}, {g}, {true, true, false})[0].to_vector();
      const std::vector<double> y_plain = gelu(x.detach()).to_vector(), y_kept = y.to_vector();
      std::size_t differ = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
        differ += !same(dx_saved[i], dx_ref[i]) + !same(dx_graph[i], dx_ref[i]) + !same(y_plain[i], y_kept[i]);
      }
      BOOST_TEST(differ == 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(gelu_float32_special_values) {
  // Large |x|: exactly x or 0, no NaN; the derivative exactly g or 0. Infinities and NaN as
  // the float64 path gives them (gelu(-inf) = -inf * 0 = NaN, as x Phi(x) in PyTorch).
  const std::vector<double> xv = {0.0, -0.0, 1e-30, -1e-30, 1e-40, 6.0, 20.0, 1e30, 3e38,
                                  -6.0, -20.0, -1e30, -3e38};
  const Shape shape{xv.size()};
  Tensor x32 = tensor(xv, shape, DType::Float32), x64 = tensor(xv, shape, DType::Float64);
  Tensor ones32 = tensor(std::vector<double>(xv.size(), 1.0), shape, DType::Float32);
  const std::vector<double> y = gelu(x32).to_vector(), d = gelu_backward(x32, ones32).to_vector();
  const std::vector<double> y64 = gelu(x64).to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    BOOST_TEST_CONTEXT("x = " << xv[i]) {
      BOOST_TEST(std::isfinite(y[i]));
      BOOST_TEST(std::isfinite(d[i]));
      if (xv[i] >= 6.0) {
        BOOST_TEST(y[i] == double(float(xv[i])));
        BOOST_TEST(d[i] == 1.0);
      }
      if (xv[i] <= -20.0) {
        BOOST_TEST(y[i] == 0.0);
        BOOST_TEST(d[i] == 0.0);
      }
      BOOST_TEST(std::fabs(y[i] - y64[i]) <= 1e-6 * std::fabs(y64[i]) + 1e-44);
    }
  }
  BOOST_TEST(y[0] == 0.0);
  BOOST_TEST(d[0] == 0.5);
  const std::vector<double> sv = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN()};
  const Shape s3{3};
  Tensor s32 = tensor(sv, s3, DType::Float32), s64 = tensor(sv, s3, DType::Float64);
  Tensor g32 = tensor({1, 1, 1}, s3, DType::Float32), g64 = tensor({1, 1, 1}, s3, DType::Float64);
  const auto a32 = gelu(s32).to_vector(), a64 = gelu(s64).to_vector();
  const auto b32 = gelu_backward(s32, g32).to_vector(), b64 = gelu_backward(s64, g64).to_vector();
  BOOST_TEST(std::isinf(a32[0]));
  BOOST_TEST(a32[0] > 0);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST_CONTEXT("x = " << sv[i]) {
      BOOST_TEST(std::isnan(a32[i]) == std::isnan(a64[i]));
      BOOST_TEST(std::isnan(b32[i]) == std::isnan(b64[i]));
      if (!std::isnan(a64[i])) BOOST_TEST(a32[i] == a64[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(gelu_float32_shapes) {
  // Rank 0, empty, and a size whose vector part is empty: same values as the element-wise
  // header functions' bounds.
  Tensor s = scalar(0.5, DType::Float32);
  BOOST_TEST(shape_str(gelu(s).shape()) == "()");
  BOOST_TEST(std::fabs(gelu(s).item() - 0.5 * ref_cdf(0.5)) <= 1e-6 * 0.5 * ref_cdf(0.5));
  Tensor e = tensor({}, {0, 3}, DType::Float32);
  BOOST_TEST(shape_str(gelu(e).shape()) == "(0, 3)");
  BOOST_TEST(shape_str(gelu_backward(e, e).shape()) == "(0, 3)");
  const std::vector<double> v = {-2.5, -0.75, 0.25, 3.0, -7.0};
  Tensor x = tensor(v, {5}, DType::Float32);
  const auto y = gelu(x).to_vector();
  for (std::size_t i = 0; i < v.size(); ++i)
    BOOST_TEST(std::fabs(y[i] - v[i] * ref_cdf(v[i])) <= 1e-6 * std::fabs(v[i] * ref_cdf(v[i])));
}

BOOST_AUTO_TEST_SUITE_END()
