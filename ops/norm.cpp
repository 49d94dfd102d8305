// layer_norm over the last axis, fused. x (..., N) is viewed as R rows of N (R = product of
// the leading dims); weight w and bias b are (N) or absent.
//
// forward, per row r (float32 or float64 throughout):
//   mean_r  = 1/N sum_i x_ri
//   var_r   = 1/N sum_i (x_ri - mean_r)^2           biased, as torch.nn.LayerNorm
//   rstd_r  = 1 / sqrt(var_r + eps)
//   xhat_ri = (x_ri - mean_r) * rstd_r
//   y_ri    = xhat_ri * w_i + b_i
// mean (R) and rstd (R) are saved for backward.
//
// backward, upstream g (R, N):
//   gw_ri = g_ri * w_i                              (g_ri without weight)
//   dx_ri = rstd_r * (gw_ri - 1/N sum_j gw_rj - xhat_ri * 1/N sum_j gw_rj xhat_rj)
//   dw_i  = sum_r g_ri * xhat_ri
//   db_i  = sum_r g_ri
// A constant row has var 0 and rstd 1/sqrt(eps): finite, so no NaN for finite inputs.
// With create_graph (grad mode on during backward) the same formulas are built from
// differentiable ops instead, so the gradient can be differentiated again.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/fastmath.hpp"
#include "xgrad/ops/avx512.hpp"
#include "xgrad/ops/isa.hpp"
#include "xgrad/ops/norm.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/unary.hpp"


namespace xgrad {
namespace {

constexpr std::size_t kRowLanes = 16;  // partial sums per row: one AVX-512 register of float

// x (R, N) -> y (R, N), mean (R), rstd (R).  w, b: (N) or nullptr.  N >= 1.
template <class T>
XGRAD_FASTMATH_INLINE void layer_norm_rows(const T* x, const T* w, const T* b, std::size_t R, std::size_t N, T eps, T* y,
                     T* mean, T* rstd) {
  const T inv_n = T(1) / T(N);
  // Rows in groups of kGroup, each step for the whole group: the rows' reductions (a chain of
  // dependent adds each) then overlap instead of one row's waiting for the last (rows of 64:
  // ~2x). Each row's operations are unchanged, so are its bits.
  constexpr std::size_t kGroup = 4;
  for (std::size_t r0 = 0; r0 < R; r0 += kGroup) {
    const std::size_t nr = std::min(kGroup, R - r0);
    T ms[kGroup], ss[kGroup];
    // mean_r = 1/N sum_i x_ri
    for (std::size_t q = 0; q < nr; ++q) {
      const T* xr = x + (r0 + q) * N;
      ms[q] = detail::lane_sum<T, kRowLanes>(N, [xr](std::size_t i) { return xr[i]; }) * inv_n;
    }
    // var_r = 1/N sum_i (x_ri - mean_r)^2   (second pass over the row: no cancellation)
    // rstd_r = 1 / sqrt(var_r + eps)
    for (std::size_t q = 0; q < nr; ++q) {
      const T* xr = x + (r0 + q) * N;
      const T m = ms[q];
      const T v = detail::lane_sum<T, kRowLanes>(N, [xr, m](std::size_t i) {
                    const T d = xr[i] - m;
                    return d * d;
                  }) * inv_n;
      ss[q] = T(1) / std::sqrt(v + eps);
    }
    for (std::size_t q = 0; q < nr; ++q) {
      const std::size_t r = r0 + q;
      const T* xr = x + r * N;
      T* yr = y + r * N;
      const T m = ms[q], s = ss[q];
      // y_ri = (x_ri - mean_r) * rstd_r * w_i + b_i   (one loop per affine variant: y is
      // written once, and each loop vectorises)
      if (w && b)
        for (std::size_t i = 0; i < N; ++i) yr[i] = (xr[i] - m) * s * w[i] + b[i];
      else if (w)
        for (std::size_t i = 0; i < N; ++i) yr[i] = (xr[i] - m) * s * w[i];
      else if (b)
        for (std::size_t i = 0; i < N; ++i) yr[i] = (xr[i] - m) * s + b[i];
      else
        for (std::size_t i = 0; i < N; ++i) yr[i] = (xr[i] - m) * s;
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

// g (R, N), x (R, N), w (N) or nullptr, mean (R), rstd (R) from the forward.
// Writes each output that is not nullptr: dx (R, N), dw (N), db (N).  N >= 1.
template <class T>
XGRAD_FASTMATH_INLINE void layer_norm_backward_rows(const T* x, const T* w, const T* g, const T* mean, const T* rstd,
                              std::size_t R, std::size_t N, T* dx, T* dw, T* db) {
  if (dw) std::fill_n(dw, N, T(0));
  if (db) std::fill_n(db, N, T(0));
  const T inv_n = T(1) / T(N);
  std::vector<T> gw_row(dx && w ? N : 0);
  for (std::size_t r = 0; r < R; ++r) {
    const T* xr = x + r * N;
    const T* gr = g + r * N;
    const T m = mean[r], s = rstd[r];
    // dw_i += g_ri * xhat_ri,  db_i += g_ri
    if (dw)
      for (std::size_t i = 0; i < N; ++i) dw[i] += gr[i] * ((xr[i] - m) * s);
    if (db)
      for (std::size_t i = 0; i < N; ++i) db[i] += gr[i];
    if (!dx) continue;
    // gw_ri = g_ri * w_i
    const T* gw = gr;
    if (w) {
      for (std::size_t i = 0; i < N; ++i) gw_row[i] = gr[i] * w[i];
      gw = gw_row.data();
    }
    // a = 1/N sum_i gw_ri,   c = 1/N sum_i gw_ri * xhat_ri
    const T a = detail::lane_sum<T, kRowLanes>(N, [gw](std::size_t i) { return gw[i]; }) * inv_n;
    const T c = detail::lane_sum<T, kRowLanes>(N, [gw, xr, m, s](std::size_t i) { return gw[i] * ((xr[i] - m) * s); }) * inv_n;
    // dx_ri = rstd_r * (gw_ri - a - xhat_ri * c)
    T* dxr = dx + r * N;
    for (std::size_t i = 0; i < N; ++i) dxr[i] = s * (gw[i] - a - ((xr[i] - m) * s) * c);
  }
}

// float32 row loops compiled per CPU path (ops/isa.hpp); float64 as written above.
XGRAD_FASTMATH_INLINE void layer_norm_rows_f32_body(const float* x, const float* w, const float* b, std::size_t R,
                                                    std::size_t N, float eps, float* y, float* mean, float* rstd) {
  layer_norm_rows<float>(x, w, b, R, N, eps, y, mean, rstd);
}
XGRAD_ISA_KERNEL(layer_norm_rows_f32,
                 (const float* x, const float* w, const float* b, std::size_t R, std::size_t N, float eps, float* y,
                  float* mean, float* rstd),
                 (x, w, b, R, N, eps, y, mean, rstd))
XGRAD_FASTMATH_INLINE void layer_norm_backward_rows_f32_body(const float* x, const float* w, const float* g,
                                                             const float* mean, const float* rstd, std::size_t R,
                                                             std::size_t N, float* dx, float* dw, float* db) {
  layer_norm_backward_rows<float>(x, w, g, mean, rstd, R, N, dx, dw, db);
}
XGRAD_ISA_KERNEL(layer_norm_backward_rows_f32,
                 (const float* x, const float* w, const float* g, const float* mean, const float* rstd,
                  std::size_t R, std::size_t N, float* dx, float* dw, float* db),
                 (x, w, g, mean, rstd, R, N, dx, dw, db))
#ifdef XGRAD_AVX512_ROWS
// Rows of a multiple of 16 on the AVX-512 path (the reverse model's E = 64; the AVX2 path's
// variants follow), 16 lanes a
// register: the generic loops above, compiled for AVX-512, fold each row's lane sums through
// the stack (scalar adds, store-forwarding stalls). These do the same operations in the same
// order (lane_sum's lanes, then its halves 8, 4, 2, 1), so they give the same bits (test
// norm/float32_is_the_same_bits_on_the_avx2_and_avx512_paths). Whether a product is fused into
// the add that uses it is the compiler's choice (GCC: across statements, -ffp-contract=fast;
// clang: within one expression): the arithmetic is written in vector operators, not FMA
// intrinsics, each product and sum in the same statements as the loops above, so that every
// compiler fuses the same ones in both; gw = g w, which the generic backward stores into a row
// before summing it, is kept a rounded product (XGRAD_ROUNDED).
#define XGRAD_ROUNDED(x) __asm__("" : "+v"(x))
using detail::lane_halves16;
XGRAD_TARGET_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

XGRAD_TARGET_AVX512 void layer_norm_rows_avx512(const float* x, const float* w, const float* b, std::size_t R,
                                                std::size_t N, float eps, float* y, float* mean, float* rstd) {
  const float inv_n = 1.0f / float(N);
  for (std::size_t r = 0; r < R; ++r) {
    const float* xr = x + r * N;
    float* yr = y + r * N;
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t i = 0; i < N; i += 16) acc += load16(xr + i);  // mean
    const float m = lane_halves16(acc) * inv_n;
    const __m512 vm = _mm512_set1_ps(m);
    acc = _mm512_setzero_ps();
    for (std::size_t i = 0; i < N; i += 16) {  // variance: d d, then into the lanes
      const __m512 d = load16(xr + i) - vm;
      const __m512 dd = d * d;
      acc += dd;
    }
    const float v = lane_halves16(acc) * inv_n;
    const float s = 1.0f / std::sqrt(v + eps);
    const __m512 vs = _mm512_set1_ps(s);
    for (std::size_t i = 0; i < N; i += 16) {  // y, one expression per affine variant
      const __m512 xi = load16(xr + i);
      __m512 out;
      if (w && b) out = (xi - vm) * vs * load16(w + i) + load16(b + i);
      else if (w) out = (xi - vm) * vs * load16(w + i);
      else if (b) out = (xi - vm) * vs + load16(b + i);
      else out = (xi - vm) * vs;
      _mm512_storeu_ps(yr + i, out);
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

XGRAD_TARGET_AVX512 void layer_norm_backward_rows_avx512(const float* x, const float* w, const float* g,
                                                         const float* mean, const float* rstd, std::size_t R,
                                                         std::size_t N, float* dx, float* dw, float* db) {
  if (dw) std::fill_n(dw, N, 0.0f);
  if (db) std::fill_n(db, N, 0.0f);
  const float inv_n = 1.0f / float(N);
  for (std::size_t r = 0; r < R; ++r) {
    const float* xr = x + r * N;
    const float* gr = g + r * N;
    const __m512 vm = _mm512_set1_ps(mean[r]), vs = _mm512_set1_ps(rstd[r]);
    __m512 acc_a = _mm512_setzero_ps(), acc_c = _mm512_setzero_ps();
    for (std::size_t i = 0; i < N; i += 16) {
      const __m512 gi = load16(gr + i), xi = load16(xr + i);
      if (dw) _mm512_storeu_ps(dw + i, load16(dw + i) + gi * ((xi - vm) * vs));  // dw_i += g xhat
      if (db) _mm512_storeu_ps(db + i, load16(db + i) + gi);
      __m512 gw = gi;
      if (w) {
        gw = gi * load16(w + i);
        XGRAD_ROUNDED(gw);
      }
      acc_a += gw;
      const __m512 gx = gw * ((xi - vm) * vs);  // c's lane: gw xhat, then into the lanes
      acc_c += gx;
    }
    if (!dx) continue;
    const float a = lane_halves16(acc_a) * inv_n, c = lane_halves16(acc_c) * inv_n;
    const __m512 va = _mm512_set1_ps(a), vc = _mm512_set1_ps(c);
    float* dxr = dx + r * N;
    for (std::size_t i = 0; i < N; i += 16) {  // dx_i = rstd (gw_i - a - xhat_i c)
      const __m512 xi = load16(xr + i);
      __m512 gw = load16(gr + i);
      if (w) {
        gw = gw * load16(w + i);
        XGRAD_ROUNDED(gw);
      }
      _mm512_storeu_ps(dxr + i, vs * (gw - va - ((xi - vm) * vs) * vc));
    }
  }
}

// The same two kernels on the AVX2 path, the 16 lanes in two registers (lanes 0-7: lo, 8-15:
// hi), every statement above written once per half (lane_halves16 of the two halves). They
// stay two kernels: a shared template would need the arithmetic behind wrapper functions,
// across which clang does not fuse a product into its add as the generic loops do.
// Same bits (the test above). Against the generic loops on AVX2 (~6% of the reverse model's
// dense step), paired in one process on the Xeon's AVX2 path: the step 2.7% faster dense, 2.3%
// with the padding skipped.
XGRAD_TARGET_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

XGRAD_TARGET_AVX2 void layer_norm_rows_avx2(const float* x, const float* w, const float* b, std::size_t R,
                                            std::size_t N, float eps, float* y, float* mean, float* rstd) {
  const float inv_n = 1.0f / float(N);
  for (std::size_t r = 0; r < R; ++r) {
    const float* xr = x + r * N;
    float* yr = y + r * N;
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (std::size_t i = 0; i < N; i += 16) lo += load8(xr + i), hi += load8(xr + i + 8);  // mean
    const float m = lane_halves16(lo, hi) * inv_n;
    const __m256 vm = _mm256_set1_ps(m);
    lo = hi = _mm256_setzero_ps();
    for (std::size_t i = 0; i < N; i += 16) {  // variance: d d, then into the lanes
      const __m256 dl = load8(xr + i) - vm, dh = load8(xr + i + 8) - vm;
      const __m256 ddl = dl * dl, ddh = dh * dh;
      lo += ddl;
      hi += ddh;
    }
    const float v = lane_halves16(lo, hi) * inv_n;
    const float s = 1.0f / std::sqrt(v + eps);
    const __m256 vs = _mm256_set1_ps(s);
    for (std::size_t i = 0; i < N; i += 8) {  // y, one expression per affine variant
      const __m256 xi = load8(xr + i);
      __m256 out;
      if (w && b) out = (xi - vm) * vs * load8(w + i) + load8(b + i);
      else if (w) out = (xi - vm) * vs * load8(w + i);
      else if (b) out = (xi - vm) * vs + load8(b + i);
      else out = (xi - vm) * vs;
      _mm256_storeu_ps(yr + i, out);
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

XGRAD_TARGET_AVX2 void layer_norm_backward_rows_avx2(const float* x, const float* w, const float* g,
                                                     const float* mean, const float* rstd, std::size_t R,
                                                     std::size_t N, float* dx, float* dw, float* db) {
  if (dw) std::fill_n(dw, N, 0.0f);
  if (db) std::fill_n(db, N, 0.0f);
  const float inv_n = 1.0f / float(N);
  for (std::size_t r = 0; r < R; ++r) {
    const float* xr = x + r * N;
    const float* gr = g + r * N;
    const __m256 vm = _mm256_set1_ps(mean[r]), vs = _mm256_set1_ps(rstd[r]);
    __m256 acc_a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, acc_c[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (std::size_t i = 0; i < N; i += 16)
      for (std::size_t q = 0; q < 2; ++q) {  // the lo and hi halves of lanes i .. i + 15
        const std::size_t at = i + 8 * q;
        const __m256 gi = load8(gr + at), xi = load8(xr + at);
        if (dw) _mm256_storeu_ps(dw + at, load8(dw + at) + gi * ((xi - vm) * vs));  // dw_i += g xhat
        if (db) _mm256_storeu_ps(db + at, load8(db + at) + gi);
        __m256 gw = gi;
        if (w) {
          gw = gi * load8(w + at);
          XGRAD_ROUNDED(gw);
        }
        acc_a[q] += gw;
        const __m256 gx = gw * ((xi - vm) * vs);  // c's lane: gw xhat, then into the lanes
        acc_c[q] += gx;
      }
    if (!dx) continue;
    const float a = lane_halves16(acc_a[0], acc_a[1]) * inv_n, c = lane_halves16(acc_c[0], acc_c[1]) * inv_n;
    const __m256 va = _mm256_set1_ps(a), vc = _mm256_set1_ps(c);
    float* dxr = dx + r * N;
    for (std::size_t i = 0; i < N; i += 8) {  // dx_i = rstd (gw_i - a - xhat_i c)
      const __m256 xi = load8(xr + i);
      __m256 gw = load8(gr + i);
      if (w) {
        gw = gw * load8(w + i);
        XGRAD_ROUNDED(gw);
      }
      _mm256_storeu_ps(dxr + i, vs * (gw - va - ((xi - vm) * vs) * vc));
    }
  }
}
#undef XGRAD_ROUNDED
#endif

template <class T>
void forward_rows(const T* x, const T* w, const T* b, std::size_t R, std::size_t N, T eps, T* y, T* mean, T* rstd) {
#ifdef XGRAD_AVX512_ROWS
  if constexpr (std::is_same_v<T, float>)
    if (N % 16 == 0 && cpu_path() != CpuPath::Baseline)
      return cpu_path() == CpuPath::Avx512 ? layer_norm_rows_avx512(x, w, b, R, N, eps, y, mean, rstd)
                                           : layer_norm_rows_avx2(x, w, b, R, N, eps, y, mean, rstd);
#endif
  if constexpr (std::is_same_v<T, float>) layer_norm_rows_f32(x, w, b, R, N, eps, y, mean, rstd);
  else layer_norm_rows<T>(x, w, b, R, N, eps, y, mean, rstd);
}
template <class T>
void backward_rows(const T* x, const T* w, const T* g, const T* mean, const T* rstd, std::size_t R, std::size_t N,
                   T* dx, T* dw, T* db) {
#ifdef XGRAD_AVX512_ROWS
  if constexpr (std::is_same_v<T, float>)
    if (N % 16 == 0 && cpu_path() != CpuPath::Baseline)
      return cpu_path() == CpuPath::Avx512 ? layer_norm_backward_rows_avx512(x, w, g, mean, rstd, R, N, dx, dw, db)
                                           : layer_norm_backward_rows_avx2(x, w, g, mean, rstd, R, N, dx, dw, db);
#endif
  if constexpr (std::is_same_v<T, float>) layer_norm_backward_rows_f32(x, w, g, mean, rstd, R, N, dx, dw, db);
  else layer_norm_backward_rows<T>(x, w, g, mean, rstd, R, N, dx, dw, db);
}

void check_affine(const Tensor& x, const char* arg, const Tensor& t) {
  if (!t.defined()) return;
  check_same_float("layer_norm", "x", x, arg, t);
  if (t.shape() != Shape{x.shape().back()})
    throw_error<ShapeError>("layer_norm", "argument '", arg, "' has shape ", t.shape(), " but must be (",
                            x.shape().back(), "), the size of the last axis of 'x' ", x.shape());
}

void check_args(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  check_float("layer_norm", "x", x);
  if (x.dim() == 0)
    throw_error<ShapeError>("layer_norm", "argument 'x' must have at least one axis (normalised over the last), got shape ()");
  check_affine(x, "weight", w);
  check_affine(x, "bias", b);
  if (!(eps > 0)) throw_error<ValueError>("layer_norm", "eps must be > 0, got ", eps, " (for 'x' ", x.shape(), ")");
}

// The gradients of the composite formula, from differentiable ops (for create_graph).
// x (..., N), w (N) or undefined, g (..., N). Returns {dx, dw, db}, each only if asked.
std::vector<Tensor> composite_grads(const Tensor& x, const Tensor& w, const Tensor& g, double eps,
                                    bool need_x, bool need_w, bool need_b) {
  const Shape wshape{x.shape().back()};
  Tensor xc = sub(x, mean(x, {-1}, true));                            // x - mean      (..., N)
  Tensor rstd = rsqrt(add_scalar(mean(mul(xc, xc), {-1}, true), eps));  // (..., 1)
  Tensor xhat = mul(xc, rstd);                                        // (..., N)
  Tensor dx, dw, db;
  if (need_x) {
    Tensor gw = w.defined() ? mul(g, w) : g;
    Tensor a = mean(gw, {-1}, true);             // (..., 1)
    Tensor c = mean(mul(gw, xhat), {-1}, true);  // (..., 1)
    dx = mul(rstd, sub(sub(gw, a), mul(xhat, c)));
  }
  if (need_w) dw = sum_to(mul(g, xhat), wshape);
  if (need_b) db = sum_to(g, wshape);
  return {dx, dw, db};
}

// The same gradients from the fused kernel and the saved mean and rstd (R) (plain backward).
std::vector<Tensor> fused_grads(const Tensor& x, const Tensor& w, const Tensor& g, const Tensor& saved_mean,
                                const Tensor& saved_rstd, bool need_x, bool need_w, bool need_b) {
  const std::size_t N = x.shape().back();
  const std::size_t R = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  return dispatch_float("layer_norm", x.dtype(), [&](auto zero) -> std::vector<Tensor> {
    using T = decltype(zero);
    Tensor dx = need_x ? empty_tensor<T>(x.shape(), "layer_norm") : Tensor();
    Tensor dw = need_w ? empty_tensor<T>({N}, "layer_norm") : Tensor();
    Tensor db = need_b ? empty_tensor<T>({N}, "layer_norm") : Tensor();
    T* pdx = need_x ? fresh_data<T>(dx) : nullptr;
    T* pdw = need_w ? fresh_data<T>(dw) : nullptr;
    T* pdb = need_b ? fresh_data<T>(db) : nullptr;
    if (x.numel() == 0) {  // nothing to sum: dw = db = 0
      if (need_w) std::fill_n(pdw, N, T(0));
      if (need_b) std::fill_n(pdb, N, T(0));
    } else {
      backward_rows<T>(data_of<T>(x), w.defined() ? data_of<T>(w) : nullptr,
                                  data_of<T>(g), data_of<T>(saved_mean), data_of<T>(saved_rstd),
                                  R, N, pdx, pdw, pdb);
    }
    return {dx, dw, db};
  });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_args(x, weight, bias, eps);
  const std::size_t N = x.shape().back();
  const std::size_t R = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor saved_mean, saved_rstd;  // (R) each
  Tensor y = dispatch_float("layer_norm", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor yv = empty_tensor<T>(x.shape(), "layer_norm");
    saved_mean = empty_tensor<T>({R}, "layer_norm");
    saved_rstd = empty_tensor<T>({R}, "layer_norm");
    T* pm = fresh_data<T>(saved_mean);
    T* ps = fresh_data<T>(saved_rstd);
    if (x.numel() == 0) {
      std::fill_n(pm, R, T(0));
      std::fill_n(ps, R, T(0));
    } else {
      forward_rows<T>(data_of<T>(x), weight.defined() ? data_of<T>(weight) : nullptr,
                         bias.defined() ? data_of<T>(bias) : nullptr, R, N, T(eps),
                         fresh_data<T>(yv), pm, ps);
    }
    return yv;
  });

  // Node inputs: x, then weight and bias when given (as linear does); iw, ib = their
  // indices, 0 when absent.
  std::vector<Tensor> inputs{x};
  const std::size_t iw = weight.defined() ? inputs.size() : 0;
  if (weight.defined()) inputs.push_back(weight);
  const std::size_t ib = bias.defined() ? inputs.size() : 0;
  if (bias.defined()) inputs.push_back(bias);

  // d = (dx, dw, db) -> one gradient per node input.
  auto per_input = [iw, ib](const Node& n, const std::vector<Tensor>& d) {
    std::vector<Tensor> grads(n.inputs().size());
    grads[0] = d[0];
    if (iw) grads[iw] = d[1];
    if (ib) grads[ib] = d[2];
    return grads;
  };
  auto first_order = [saved_mean, saved_rstd, iw, ib, per_input](const Node& n, const Tensor& g) {
    const Tensor w = iw ? n.input(iw) : Tensor();
    return per_input(n, fused_grads(n.input(0), w, g, saved_mean, saved_rstd, n.needs_grad(0),
                                    iw && n.needs_grad(iw), ib && n.needs_grad(ib)));
  };
  auto differentiable = [eps, iw, ib, per_input](const Node& n, const Tensor& g) {
    const Tensor w = iw ? n.input(iw) : Tensor();
    return per_input(n, composite_grads(n.input(0), w, g, eps, n.needs_grad(0), iw && n.needs_grad(iw),
                                        ib && n.needs_grad(ib)));
  };
  return record_fused("layer_norm", y, std::move(inputs), first_order, differentiable);
}

// --- registration ----------------------------------------------------------------------
namespace {
// x with one row constant: var 0, rstd = 1/sqrt(eps), the gradient is still finite.
Tensor constant_row_x(Rng& r) {
  Tensor x = sample_randn({3, 4}, r).detach().clone();
  for (std::size_t i = 0; i < 4; ++i) x.mutable_data<double>()[4 + i] = 0.75;
  x.set_requires_grad(true);
  return x;
}
std::vector<OpSample> affine_samples(Rng& r) {
  return {{"(2,5) with weight and bias", {sample_randn({2, 5}, r), sample_randn({5}, r), sample_randn({5}, r)}},
          {"(2,3,4) with weight and bias", {sample_randn({2, 3, 4}, r), sample_randn({4}, r), sample_randn({4}, r)}},
          {"(3,4) row 1 constant", {constant_row_x(r), sample_randn({4}, r), sample_randn({4}, r)}},
          {"(2,4) weight not differentiated", {sample_randn({2, 4}, r), randn({4}, r, DType::Float64), sample_randn({4}, r)}},
          {"(2,4) bias not differentiated", {sample_randn({2, 4}, r), sample_randn({4}, r), randn({4}, r, DType::Float64)}}};
}
std::vector<OpSample> plain_samples(Rng& r) {
  return {{"(2,5)", {sample_randn({2, 5}, r)}},
          {"(2,3,4)", {sample_randn({2, 3, 4}, r)}},
          {"(3,4) row 1 constant", {constant_row_x(r)}}};
}
}  // namespace

XGRAD_REGISTER_OP({"layer_norm", [](const auto& x) { return layer_norm(x[0], x[1], x[2]); }, affine_samples});
XGRAD_REGISTER_OP({"layer_norm(no affine)", [](const auto& x) { return layer_norm(x[0], {}, {}); },
                   plain_samples});

}  // namespace xgrad
