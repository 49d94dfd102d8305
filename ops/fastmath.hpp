// xgrad/ops/fastmath.hpp — float32 exp / erf / GELU pieces that GCC auto-vectorises.
//
// Internal: include from op implementation files (.cpp) only. Every scalar function here is
// branch-free straight-line float/int arithmetic (bit-mask selects and clamps, no libm calls,
// no tables), so a plain loop `for (i...) out[i] = fast_expf(in[i]);` over float arrays is
// vectorised by GCC 12 at -O3, with SSE2 or wider (at -O2 only when the trip count is a
// multiple of the vector width: see vector_prefix). For AVX2 / AVX-512 code in a library built
// for baseline x86-64, define the kernel with XGRAD_ISA_KERNEL (ops/isa.hpp).
//
// Accuracy, float32 results against double std::exp / std::erf / std::erfc, measured over
// every float input, for the baseline (SSE2) build and for the x86-64-v3 / v4 (FMA) builds;
// the "tested" bound is what tests/test_fastmath.cpp asserts on a dense grid:
//   fast_expf(x)  max error 0.99 ulp baseline, 1.02 ulp FMA (tested 1.5 ulp) wherever e^x is a
//                 normal float (-87.34 <= x <= 88.72); gradual underflow below that (error
//                 < 0.75 of the subnormal step); exactly 0 for x < -103.98 and -inf; +inf
//                 above 88.7228 and for +inf; e^+-0 = 1; NaN -> NaN.
//   fast_erff(x)  max absolute error 8.2e-8 (tested 1.2e-7), about 1.4 ulp of numbers just
//                 below 1; for |x| < 1 max error 1.32 ulp (tested 2 ulp), relative, so tiny and
//                 subnormal x get erf(x) = 2x / sqrt(pi) right; exactly +-1 for |x| >= 3.92 and
//                 +-inf; odd bit for bit, erf(-0) = -0; NaN -> NaN.
//   gelu_parts    Phi(x) max relative error 5.3e-7 (tested 8e-7) wherever Phi(x) is a normal
//                 float (x >= -13.1), both tails included (2.6e-7 for x >= 0): Phi(x) for x < 0
//                 is erfc(|x| / sqrt 2) / 2 itself, not 1 + erf(x / sqrt 2) (no cancellation);
//                 gauss = e^(-x^2/2) max relative error 1.8e-7 (tested 3e-7).
//
// Methods (coefficients fitted by minimax (Remez exchange, or iteratively reweighted least
// squares for the rational) against 40-digit reference values, then rounded to float):
//   exp: x = k ln2 + r, k = nearest integer to x / ln2 (added to and taken back out of
//        1.5 * 2^23, which also leaves k in the low bits of the float's pattern),
//        |r| <= ln2 / 2 with ln2 split in two (Cody-Waite) so that k * ln2_hi is exact;
//        e^r = 1 + r + r^2 q(r), q of degree 4 (minimax relative error 3.1e-9);
//        2^k applied as 2^(k/2) * 2^(k - k/2), two normal powers of two, so that results
//        down in the subnormal range (k down to -159) are rounded once, at the last multiply.
//   erf: a = |x|. For a < 1: erf(a) = a + a Q(a^2), Q of degree 6 (minimax relative error
//        1.2e-9; the leading term a is exact, hence the tiny-x behaviour).
//        For a >= 1: erf(a) = 1 - erfc(a), erfc(a) = e^(-a^2) G(a), with G(a) = erfc(a) e^(a^2)
//        approximated on [0, 12] by a rational P4(a) / Q5(a) with positive coefficients
//        (relative error 7.8e-9). Both branches are computed and one is selected.
//   Phi: Phi(-|x|) = e^(-x^2/2) G(|x| / sqrt 2) / 2, Phi(|x|) = 1 - Phi(-|x|); e^(-x^2/2)
//        from x^2 split exactly into a rounded square and its rounding error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

// Every scalar function here is forced inline: the loops only vectorise when the whole body
// is inlined, and at -O2 GCC's size heuristics otherwise keep calls to the larger ones.
#if defined(__GNUC__)
#define XGRAD_FASTMATH_INLINE inline __attribute__((always_inline))
#else
#define XGRAD_FASTMATH_INLINE inline
#endif

namespace xgrad::fastmath {

namespace impl {

XGRAD_FASTMATH_INLINE std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
XGRAD_FASTMATH_INLINE float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
XGRAD_FASTMATH_INLINE float abs(float x) { return from_bits(bits(x) & 0x7fffffffu); }
// c ? a : b, as a bit mask rather than a conditional: with `?:` on floats GCC may fold the
// constant arm through the code that follows (partial redundancy elimination), leaving a
// branch around trapping float operations that if-conversion then refuses to undo, and the
// loop is not vectorised.
XGRAD_FASTMATH_INLINE float select(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return from_bits((bits(a) & m) | (bits(b) & ~m));
}
// |m| with the sign bit of s (m must be >= 0 or NaN).
XGRAD_FASTMATH_INLINE float with_sign_of(float m, float s) { return from_bits(bits(m) | (bits(s) & 0x80000000u)); }

// erf(a) for 0 <= a <= 1 (also right for subnormal a): a + a * Q(a^2).
XGRAD_FASTMATH_INLINE float erf_small(float a) {
  const float s = a * a;
  float q = 7.85386146e-05f;
  q = q * s + -0.000801019371f;
  q = q * s + 0.00518832775f;
  q = q * s + -0.0268538129f;
  q = q * s + 0.112835854f;
  q = q * s + -0.37612626f;
  q = q * s + 0.128379166f;
  return a + a * q;
}

// G(a) = erfc(a) exp(a^2) for 0 <= a <= 12, as P(a) / Q(a) with P of degree 4 and Q of
// degree 5 (all coefficients positive: no cancellation in either polynomial; P / Q tends to
// 0.5642 / a, like G, as a grows). a above 12 is treated as 12 (erfc(a) underflows long before;
// this also keeps a^5 finite); NaN stays NaN.
XGRAD_FASTMATH_INLINE float erfcx(float a) {
  a = select(a > 12.0f, 12.0f, a);
  float p = 0.0342676379f;
  p = p * a + 0.23617053f;
  p = p * a + 0.746117175f;
  p = p * a + 1.25217974f;
  p = p * a + 1.0f;
  float q = 0.0607373156f;
  q = q * a + 0.4186216f;
  q = q * a + 1.35247183f;
  q = q * a + 2.43227887f;
  q = q * a + 2.38055968f;
  q = q * a + 1.0f;
  return p / q;
}

}  // namespace impl

namespace impl {
// x = k ln2 + r with k the nearest integer to x / ln2 and |r| <= ln2 / 2: returns e^r, sets k.
// x must lie in [-110, 100] or be NaN (NaN: NaN, k unspecified).
XGRAD_FASTMATH_INLINE float exp_reduced(float x, std::int32_t& k) {
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269502f + kShifter;
  const float kf = t - kShifter;
  // k = kf as an integer, read from the bit pattern (unsigned arithmetic: no overflow for NaN).
  k = static_cast<std::int32_t>(bits(t) - bits(kShifter));
  float r = x - kf * 0.693145751953125f;  // ln2_hi: 16 significant bits, kf * ln2_hi exact
  r = r - kf * 1.42860677e-06f;           // ln2_lo = ln2 - ln2_hi
  float q = 0.00138141634f;
  q = q * r + 0.00836892705f;
  q = q * r + 0.0416684076f;
  q = q * r + 0.166665182f;
  q = q * r + 0.49999994f;
  return 1.0f + (r + (r * r) * q);
}
// 2^k as a float, for -126 <= k <= 127 (a normal power of two).
XGRAD_FASTMATH_INLINE float pow2(std::int32_t k) { return from_bits(static_cast<std::uint32_t>(k + 127) << 23); }
}  // namespace impl

// e^x in float32; see the header comment for the error bounds.
XGRAD_FASTMATH_INLINE float fast_expf(float x) {
  // Clamp (written so that NaN passes through both compares unchanged). Past these bounds
  // the result is 0 or +inf anyway, and k below stays within [-159, 144].
  x = impl::select(x < -110.0f, -110.0f, x);
  x = impl::select(x > 100.0f, 100.0f, x);
  std::int32_t k;
  const float p = impl::exp_reduced(x, k);
  const std::int32_t k1 = k >> 1, k2 = k - k1;  // 2^k = 2^k1 * 2^k2, each a normal float
  return p * impl::pow2(k1) * impl::pow2(k2);
}

// e^x for -87 <= x <= 0, and NaN -> NaN (other x: unspecified), with fast_expf's bits: the
// same reduction, without the clamps, and 2^k (k >= -126 here) applied as one normal power of
// two, where fast_expf's two exact multiplies round once just the same (e^x is normal here).
// The softmax's shifted scores x - max (ops/attention.cpp): ~10 vector instructions fewer.
XGRAD_FASTMATH_INLINE float fast_expf_nonpositive(float x) {
  std::int32_t k;
  const float p = impl::exp_reduced(x, k);
  return p * impl::pow2(k);
}

// erf(x) in float32; see the header comment for the error bounds.
XGRAD_FASTMATH_INLINE float fast_erff(float x) {
  const float a = impl::abs(x);
  const float small = impl::erf_small(a);
  // For a >= 3.92 erfc(a) < 2^-25 and 1 - erfc rounds to exactly 1.
  const float large = 1.0f - fast_expf(-(a * a)) * impl::erfcx(a);
  const float r = impl::select(a < 1.0f, small, large);  // NaN: large, which is NaN
  return impl::with_sign_of(r, x);
}

// The two factors of GELU for x: cdf = Phi(x) = (1 + erf(x / sqrt 2)) / 2 and
// gauss = exp(-x^2 / 2) (so that the density is phi(x) = gauss / sqrt(2 pi)).
// Phi(x) for x < 0 is erfc(|x| / sqrt 2) / 2 computed directly, so it keeps its relative
// accuracy in the left tail. Infinite x: cdf 0 or 1 and gauss 0; NaN x: both NaN.
XGRAD_FASTMATH_INLINE void gelu_parts(float x, float& cdf, float& gauss) {
  float ax = impl::abs(x);
  ax = impl::select(ax > 20.0f, 20.0f, ax);  // exp(-200) is 0 in float; keeps x^2 finite (NaN passes)
  // x^2 = sq + sq_lo exactly: x = xh + xl with xh the top 12 significant bits, so the
  // partial products are exact. Then e^(-x^2/2) = e^(-sq/2) (1 - sq_lo/2) to float accuracy,
  // without the error |x|^2 / 2 * 2^-24 of using the rounded square alone.
  const float xh = impl::from_bits(impl::bits(ax) & 0xfffff000u), xl = ax - xh;
  const float sq = ax * ax;
  const float sq_lo = ((xh * xh - sq) + 2.0f * xh * xl) + xl * xl;
  gauss = fast_expf(-0.5f * sq) * (1.0f - 0.5f * sq_lo);
  // Phi(-|x|) = erfc(a) / 2 with a = |x| / sqrt 2, from the erfc form on the whole range:
  // no cancellation (Phi is never computed as 1/2 - something), so both tails keep their
  // relative accuracy; Phi(|x|) = 1 - Phi(-|x|) >= 1/2 has no cancellation either.
  const float lower = 0.5f * gauss * impl::erfcx(ax * 0.707106769f);
  const float upper = 1.0f - lower;
  cdf = impl::select(x < 0.0f, lower, upper);  // NaN x: NaN got through the clamp, both are NaN
}

// GELU and its derivative for float32 x: y = x Phi(x) and dy = Phi(x) + x phi(x), from one
// gelu_parts (the forward keeps dy for the backward when the output is recorded).
XGRAD_FASTMATH_INLINE void fast_gelu_and_grad(float x, float& y, float& dy) {
  float cdf, gauss;
  gelu_parts(x, cdf, gauss);
  y = x * cdf;
  dy = cdf + x * (gauss * 0.398942292f);  // 1 / sqrt(2 pi)
}
XGRAD_FASTMATH_INLINE float fast_gelu(float x) {
  float y, dy;
  fast_gelu_and_grad(x, y, dy);
  return y;
}
XGRAD_FASTMATH_INLINE float fast_gelu_grad(float x) {
  float y, dy;
  fast_gelu_and_grad(x, y, dy);
  return dy;
}

// Array loops. GCC 12 vectorises at -O2 only loops that need no scalar remainder ("very cheap"
// cost model), so the loops below run over a prefix whose length is a multiple of 16 (any
// vector width up to 512 bits) and then over the rest; at -O3 either way works.
XGRAD_FASTMATH_INLINE std::size_t vector_prefix(std::size_t n) { return n & ~std::size_t(15); }

// out[i] = e^in[i]; in and out must not overlap (exp_inplace for one array).
XGRAD_FASTMATH_INLINE void exp_array(const float* __restrict in, float* __restrict out, std::size_t n) {
  const std::size_t m = vector_prefix(n);
  for (std::size_t i = 0; i < m; ++i) out[i] = fast_expf(in[i]);
  for (std::size_t i = m; i < n; ++i) out[i] = fast_expf(in[i]);
}
// p[i] = e^p[i].
XGRAD_FASTMATH_INLINE void exp_inplace(float* p, std::size_t n) {
  const std::size_t m = vector_prefix(n);
  for (std::size_t i = 0; i < m; ++i) p[i] = fast_expf(p[i]);
  for (std::size_t i = m; i < n; ++i) p[i] = fast_expf(p[i]);
}
// out[i] = erf(in[i]); in and out must not overlap.
XGRAD_FASTMATH_INLINE void erf_array(const float* __restrict in, float* __restrict out, std::size_t n) {
  const std::size_t m = vector_prefix(n);
  for (std::size_t i = 0; i < m; ++i) out[i] = fast_erff(in[i]);
  for (std::size_t i = m; i < n; ++i) out[i] = fast_erff(in[i]);
}

}  // namespace xgrad::fastmath
