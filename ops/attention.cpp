// Fused multi-head attention: forward and backward on strided head slices, in memory
// linear in the sequence length.
//
// Head h of batch b of a (B, L, H*w) operand is the column block [h*w, (h+1)*w) of its L
// rows; GEMMs read and write it in place through their leading dimension (ld = H*w, or
// 3*H*D for packed qkv), so heads are never split or merged by copies.
//
// For each (b, h) and each block of 64 query rows [r0, r1) of the computed queries [0, t_end)
// (r rows), where only keys [0, c) can be visible:
//   t_end = T, or with skip_padded_queries 1 + batch b's last unpadded position (the later
//           queries get O = 0 and dQ = 0);
//   c     = S, or min(S, r1) with is_causal, and at most 1 + batch b's last key that is not
//           key padding (the masked future and trailing padding are not computed; their
//           K, V entries are never read, so non-finite values there do not propagate);
//   per head, once: K^T (D, c_all), V (c_all, Dv) (forward), V^T, K (backward) packed,
//   c_all = the last row block's c (K^T, V^T: pack_keys_transposed; V, K: head_rows)
//   forward                                        shapes
//     X  = scale Q K^T                             (r, c)    keys_gemm, into a per-thread scratch
//     X  = row softmax(X + float_mask), masked     (r, c)    also saves m = row max, l = 1 / row sum
//     O  = X V                                     (r, Dv)   head_gemm
//   backward, upstream dO (r, Dv)
//     P  = exp(scale Q K^T + float_mask - m) l     (r, c)    keys_gemm + one pass: the forward's bits
//     dP = dO V^T                                  (r, c)    keys_gemm
//     dS = P * (dP - rowsum(dP * P))               (r, c)    softmax backward (in dP)
//     dV^T += dO^T P                               (Dv, c)   head_gemm, summed over row blocks
//     dQ = scale dS K                              (r, D)    head_gemm
//     dK^T += scale Q^T dS                         (D, c)    head_gemm, summed over row blocks
//   and dK, dV stored from dK^T, dV^T once per head; with at most 16 keys, dV += P^T dO and
//   dK += scale dS^T Q directly (the same elements, each a sum over the block's rows in order,
//   so the same bits either way)
// Saved for the backward: the inputs and (B, H, T, 2) row statistics, and the probabilities
// of the row blocks above, back to back (KeptLayout), when they take at most 32 MiB
// (keep_probabilities); otherwise they exist only as (64, S) scratch
// per thread (the FlashAttention recomputation; keys are not tiled, so a row block's softmax
// is the exact one-pass softmax and its GEMMs keep long key extents).
// (b, h) pairs run in parallel_for. Under create_graph the backward is instead composed of
// differentiable xgrad ops (composite_backward) so it can be differentiated again.
// attention_packed_rows runs the same kernels on a qkv of packed rows (batch b's rows l < L_b
// at first_row[b] + l, HeadView): key_end = t_end = L_b, so no padding row is read or written.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "xgrad/framework/parallel.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/avx512.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/fastmath.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/isa.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/shape.hpp"

#include "xgrad/ops/softmax.hpp"

namespace xgrad {
namespace {

constexpr std::size_t kRowBlock = 64;  // query rows per block: scratch (64, S); causal blocks skip future keys

struct Dims {
  std::size_t B = 0, H = 0, T = 0, S = 0, D = 0, Dv = 0;
};

// Element (b, l, h, c) of a (B, L, H*width) operand: base[b * batch_stride + l * ld + h * width + c];
// of an (N, H*width) operand of packed rows (attention_packed_rows): base[(first_row[b] + l) * ld
// + h * width + c], where only batch b's rows l < L_b exist.
template <class P>
struct HeadView {
  P* base = nullptr;
  std::size_t ld = 0, batch_stride = 0, width = 0;
  const std::size_t* first_row = nullptr;  // (B) with packed rows, else null
  P* at(std::size_t b, std::size_t h, std::size_t row = 0) const {
    return base ? base + (first_row ? first_row[b] * ld : b * batch_stride) + row * ld + h * width : nullptr;
  }
  // Rows past a batch's last computed query or key: the padded layout stores them (zeroed by
  // the kernels), the packed one has none.
  bool stores_padding() const { return first_row == nullptr; }
};
template <class P>
HeadView<P> heads_of(P* data, std::size_t L, std::size_t ld, std::size_t width, std::size_t column = 0,
                     const std::size_t* first_row = nullptr) {
  return {data ? data + column : nullptr, ld, L * ld, width, first_row};
}

// The masks as raw pointers with (B, H, T, S) element strides (0 along broadcast dims).
template <class T>
struct MaskView {
  const bool* mask = nullptr;
  std::array<std::size_t, 4> ms{};
  const bool* padding = nullptr;  // (B, S)
  const T* add = nullptr;
  std::array<std::size_t, 4> as{};
  bool causal = false;
  // With a key padding mask: per batch, 1 + the last key that is not padding (0 if none).
  // Every later key is masked for every query, so no row block computes it.
  const std::size_t* key_end = nullptr;  // (B), key_ends()
  bool skip_queries = false;  // AttentionMasks::skip_padded_queries (T == S)
};

std::array<std::size_t, 4> strides4(const Shape& s, const Shape& full) {
  const auto v = detail::broadcast_strides(s, full);
  return {v[0], v[1], v[2], v[3]};
}

// Per batch, 1 + the last key that is not padding (0 if none); empty without a key padding mask.
std::vector<std::size_t> key_ends(const AttentionMasks& m, const Dims& d) {
  std::vector<std::size_t> end;
  if (!m.key_padding_mask.defined()) return end;
  const bool* padding = m.key_padding_mask.data<bool>();
  end.assign(d.B, 0);
  for (std::size_t b = 0; b < d.B; ++b)
    for (std::size_t s = d.S; s-- > 0;)
      if (!padding[b * d.S + s]) {
        end[b] = s + 1;
        break;
      }
  return end;
}

// key_end: key_ends(m, d), computed once per op call for its forward and backward. With
// packed_rows (attention_packed_rows, m without key padding) key_end holds the lengths L_b,
// which alone mask the padding: keys and queries past L_b are not computed.
template <class T>
MaskView<T> mask_view(const AttentionMasks& m, const Dims& d, const std::vector<std::size_t>& key_end,
                      bool packed_rows = false) {
  const Shape full{d.B, d.H, d.T, d.S};
  MaskView<T> v;
  if (m.mask.defined()) v.mask = m.mask.data<bool>(), v.ms = strides4(m.mask.shape(), full);
  if (m.key_padding_mask.defined()) v.padding = m.key_padding_mask.data<bool>(), v.key_end = key_end.data();
  if (m.float_mask.defined()) v.add = data_of<T>(m.float_mask), v.as = strides4(m.float_mask.shape(), full);
  v.causal = m.is_causal;
  v.skip_queries = m.skip_padded_queries;
  if (packed_rows) v.key_end = key_end.data(), v.skip_queries = true;
  return v;
}

// The row statistics of a query with nothing visible: max -inf, 1 / sum 0 (P = 0).
template <class T>
void set_nothing_visible(T* st) {
  st[0] = -std::numeric_limits<T>::infinity(), st[1] = T(0);
}

// Query rows [0, end) of batch b are computed; with skip_padded_queries the later ones are
// padding (their output rows are 0, their statistics those of a row with nothing visible).
template <class T>
std::size_t query_end(const Dims& d, const MaskView<T>& m, std::size_t b) {
  return m.skip_queries ? m.key_end[b] : d.T;
}

// Row helpers written over kLanes independent accumulators so that the compiler
// vectorises them without -ffast-math (a single accumulator is a serial dependency).
// row_max and exp_shifted_sum take whole blocks (n a multiple of kLanes: the padded rows of
// softmax_rows), so they have no scalar remainder loop.
constexpr std::size_t kLanes = 16;
static_assert(kLanes == 16, "row_max's folding stages assume 16 lanes");

// The kLanes lanes as 16-byte GCC vectors (four of float, eight of double): lane-wise compare
// and select, native on every path (xmm; a vector wider than the target's registers GCC splits
// into scalars), where the element-wise loop over an array of lanes stayed scalar (16 loads and
// maxss per 16 keys on every path).
template <class T> struct LaneVector;
template <> struct LaneVector<float> {
  typedef float type __attribute__((vector_size(16)));
  typedef std::int32_t mask __attribute__((vector_size(16)));  // a lane-wise condition
};
template <> struct LaneVector<double> {
  typedef double type __attribute__((vector_size(16)));
  typedef std::int64_t mask __attribute__((vector_size(16)));
};

template <class T>
XGRAD_FASTMATH_INLINE T row_max(const T* x, std::size_t n) {
  using V = typename LaneVector<T>::type;
  constexpr std::size_t kPer = sizeof(V) / sizeof(T), kVectors = kLanes / kPer;
  V lanes[kVectors];  // lane l is element l % kPer of lanes[l / kPer]
  for (V& v : lanes) v = V{} - std::numeric_limits<T>::infinity();
  for (std::size_t j = 0; j < n; j += kLanes)
    for (std::size_t q = 0; q < kVectors; ++q) {  // lane l: max over x[j + l], as an array of lanes would
      V v;
      std::memcpy(&v, x + j + q * kPer, sizeof v);
      lanes[q] = lanes[q] < v ? v : lanes[q];
    }
  T acc[kLanes];
  std::memcpy(acc, lanes, sizeof acc);
  // lanes halved in turn, each stage a loop of constant length:
  // GCC keeps them in registers, where one loop over the stage widths made it reduce through
  // the stack (store-forwarding stalls)
  const auto fold = [&acc](std::size_t l, std::size_t w) { acc[l] = acc[l] < acc[l + w] ? acc[l + w] : acc[l]; };
  for (std::size_t l = 0; l < 8; ++l) fold(l, 8);
  for (std::size_t l = 0; l < 4; ++l) fold(l, 4);
  for (std::size_t l = 0; l < 2; ++l) fold(l, 2);
  fold(0, 1);
  return acc[0];
}

// e^d for a shifted score d <= 0. float32: fastmath's vectorised exp (<= 1.5 ulp), with d < -87
// (masked keys: d = -inf) set to 0 directly: letting the exp underflow through subnormal
// intermediates costs a microcode assist per element (x86 without FTZ), which made the
// softmax 10% of a training step. NaN still propagates.
template <class T>
XGRAD_FASTMATH_INLINE T exp_shifted(T d) {
  return std::exp(d);
}
template <>
XGRAD_FASTMATH_INLINE float exp_shifted<float>(float d) {
  constexpr float kLow = -87.0f;  // e^-87 = 1.6e-38, still a normal float
  const bool low = d < kLow;
  return fastmath::impl::select(low, 0.0f, fastmath::fast_expf_nonpositive(fastmath::impl::select(low, kLow, d)));
}

// x[j] = exp(x[j] - mx); returns the sum (vectorised inside softmax_rows' float32 variants):
// element j is added into lane j mod kLanes, then the lanes in order (for a row of at most
// kLanes keys, the elements in order: the sum the composite softmax of need_weights forms).
template <class T>
XGRAD_FASTMATH_INLINE T exp_shifted_sum(T* x, std::size_t n, T mx) {
  T acc[kLanes] = {};
  for (std::size_t j = 0; j < n; j += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) acc[l] += (x[j + l] = exp_shifted(x[j + l] - mx));
  T total = 0;
  for (std::size_t l = 0; l < kLanes; ++l) total += acc[l];
  return total;
}

// x[j] = -inf for j in [n, np) and where masked(j) for j < n (masked is only asked about keys
// below n), over the 16-byte vectors from j0 (a multiple of their width) to np (a multiple of
// kLanes): a lane-wise select and a whole-vector store each. Key by key, GCC made
// `masked ? -inf : x` a conditional store (a branch per key, mispredicted on padding), and
// scalar stores (std::fill's too) stall the row max's vector loads that read them back
// (store forwarding). Lanes past n may hold anything (the causal future, or storage no GEMM
// wrote): they are selected away, never branched on.
template <class T, class Masked>
XGRAD_FASTMATH_INLINE void mask_keys(T* x, std::size_t j0, std::size_t n, std::size_t np, Masked masked) {
  using V = typename LaneVector<T>::type;
  using M = typename LaneVector<T>::mask;
  constexpr std::size_t kPer = sizeof(V) / sizeof(T);
  const V ninf = V{} - std::numeric_limits<T>::infinity();
  for (std::size_t j = j0; j < np; j += kPer) {
    V v;
    std::memcpy(&v, x + j, sizeof v);
    M hit{};
    for (std::size_t l = 0; l < kPer; ++l) hit[l] = (j + l >= n || masked(j + l)) ? -1 : 0;
    v = hit != 0 ? ninf : v;
    std::memcpy(x + j, &v, sizeof v);
  }
}

// Row i (query i of head (b, h)), its first n scores x visible, storage for np = padded(n):
// the additive and bool masks applied to the n, and x[j] = -inf for j in [n, np).
template <class T>
XGRAD_FASTMATH_INLINE void mask_row(T* x, std::size_t i, std::size_t n, std::size_t np, std::size_t b, std::size_t h,
                                    std::size_t S, const MaskView<T>& m) {
  constexpr std::size_t kPer = sizeof(typename LaneVector<T>::type) / sizeof(T);
  if (m.add) {
    const T* ar = m.add + b * m.as[0] + h * m.as[1] + i * m.as[2];
    for (std::size_t j = 0; j < n; ++j) x[j] += ar[j * m.as[3]];
  }
  const bool* mr = m.mask ? m.mask + b * m.ms[0] + h * m.ms[1] + i * m.ms[2] : nullptr;
  const bool* pr = m.padding ? m.padding + b * S : nullptr;
  if (pr && m.skip_queries && pr[i])  // a padding query sees nothing
    return mask_keys(x, 0, 0, np, [](std::size_t) { return true; });
  if (mr && pr)
    return mask_keys(x, 0, n, np, [mr, pr, step = m.ms[3]](std::size_t j) { return mr[j * step] || pr[j]; });
  if (mr) return mask_keys(x, 0, n, np, [mr, step = m.ms[3]](std::size_t j) { return mr[j * step]; });
  if (pr) return mask_keys(x, 0, n, np, [pr](std::size_t j) { return pr[j]; });
  mask_keys(x, n / kPer * kPer, n, np, [](std::size_t) { return false; });  // only [n, np)
}

// Keys query row i may see among the c keys its row block computed.
template <class T>
XGRAD_FASTMATH_INLINE std::size_t visible_keys(const MaskView<T>& m, std::size_t i, std::size_t c) {
  return m.causal ? std::min(c, i + 1) : c;
}

// n rounded up to whole blocks of kLanes. softmax_rows and probs_rows run every row of n
// visible keys over padded(n) elements, the ones past n set to -inf first (e^-inf = 0
// exactly, so the max, the lane sums and the probabilities are those of the n keys): whole
// vectors on the AVX2 and AVX-512 paths instead of a scalar loop for rows shorter than 16
// keys (padded batches, the first rows of a causal block). A row's storage (row stride ldx)
// holds padded(c) elements: ldx is prob_stride(c) or panel_stride(S).
constexpr std::size_t padded(std::size_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Query rows [r0, r1) of head (b, h), row i at X + (i - r0) * c: on entry the scaled scores of
// keys [0, c); on return the probabilities (0 for masked keys and the causal future), and
// the row statistics stats[2 (i - r0)] = max, stats[2 (i - r0) + 1] = 1 / sum (-inf and 0
// for a row with nothing visible) from which probs_rows_impl recomputes the same bits.
// Groups of rows go through three passes (mask and max, exp and sum, scale): the exps of
// different rows do not wait for each other, so short rows (16 keys) overlap in the pipeline
// instead of each paying its own max -> exp -> sum latency.
// float32 runs per CPU path (ops/isa.hpp; masks become vector blends, maxima vector max).
template <class T>
XGRAD_FASTMATH_INLINE void softmax_rows_impl(T* X, std::size_t ldx, std::size_t r0, std::size_t r1, std::size_t c,
                                             std::size_t S, std::size_t b, std::size_t h, const MaskView<T>& m,
                                             T* stats) {
  constexpr std::size_t kGroup = 16;
  const T ninf = -std::numeric_limits<T>::infinity();
  for (std::size_t g0 = r0; g0 < r1; g0 += kGroup) {
    const std::size_t g1 = std::min(r1, g0 + kGroup);
    T mx[kGroup], total[kGroup];
    for (std::size_t i = g0; i < g1; ++i) {
      T* x = X + (i - r0) * ldx;
      const std::size_t n = visible_keys(m, i, c), np = padded(n);
      mask_row(x, i, n, np, b, h, S, m);
      std::fill(x + std::min(np, c), x + c, T(0));
      mx[i - g0] = row_max(x, np);
    }
    for (std::size_t i = g0; i < g1; ++i) {
      T* x = X + (i - r0) * ldx;
      if (mx[i - g0] == ninf)  // nothing visible: P = 0, never exp(-inf - -inf) = NaN
        std::fill(x, x + padded(visible_keys(m, i, c)), T(0));
      else
        total[i - g0] = exp_shifted_sum(x, padded(visible_keys(m, i, c)), mx[i - g0]);
    }
    for (std::size_t i = g0; i < g1; ++i) {
      T* st = stats + 2 * (i - r0);
      set_nothing_visible(st);
      if (mx[i - g0] == ninf) continue;
      st[0] = mx[i - g0];
      T* x = X + (i - r0) * ldx;
      const T inv = st[1] = T(1) / total[i - g0];
      for (std::size_t j = 0, np = padded(visible_keys(m, i, c)); j < np; ++j) x[j] *= inv;
    }
  }
}

// The probabilities softmax_rows_impl wrote, from the same scores and its row statistics:
// P = exp_shifted(x - max) * (1 / sum), the same operations in the same order, so the same bits.
template <class T>
XGRAD_FASTMATH_INLINE void probs_rows_impl(T* X, std::size_t ldx, std::size_t r0, std::size_t r1, std::size_t c,
                                           std::size_t S, std::size_t b, std::size_t h, const MaskView<T>& m,
                                           const T* stats) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (std::size_t i = r0; i < r1; ++i) {
    T* x = X + (i - r0) * ldx;
    const std::size_t n = visible_keys(m, i, c);
    const T mx = stats[2 * (i - r0)], inv = stats[2 * (i - r0) + 1];
    if (mx == ninf) {
      std::fill(x, x + c, T(0));
      continue;
    }
    const std::size_t np = padded(n);
    mask_row(x, i, n, np, b, h, S, m);
    for (std::size_t j = 0; j < np; ++j) x[j] = exp_shifted(x[j] - mx) * inv;
    std::fill(x + std::min(np, c), x + c, T(0));
  }
}

// Softmax backward in place over r rows of c keys (P's row stride ldp, G's ldg):
// g = p * (g - rowsum(g * p)).
template <class T>
XGRAD_FASTMATH_INLINE void softmax_grad_rows_impl(const T* P, std::size_t ldp, T* G, std::size_t ldg, std::size_t r,
                                                  std::size_t c) {
  for (std::size_t i = 0; i < r; ++i) {
    const T* p = P + i * ldp;
    T* g = G + i * ldg;
    const T dot = detail::lane_sum<T, kLanes>(c, [g, p](std::size_t j) { return g[j] * p[j]; });
    for (std::size_t j = 0; j < c; ++j) g[j] = p[j] * (g[j] - dot);
  }
}

XGRAD_FASTMATH_INLINE void softmax_rows_f32_body(float* X, std::size_t ldx, std::size_t r0, std::size_t r1,
                                                 std::size_t c, std::size_t S, std::size_t b, std::size_t h,
                                                 const MaskView<float>& m, float* stats) {
  softmax_rows_impl<float>(X, ldx, r0, r1, c, S, b, h, m, stats);
}
XGRAD_ISA_KERNEL(softmax_rows_f32,
                 (float* X, std::size_t ldx, std::size_t r0, std::size_t r1, std::size_t c, std::size_t S,
                  std::size_t b, std::size_t h, const MaskView<float>& m, float* stats),
                 (X, ldx, r0, r1, c, S, b, h, m, stats))
XGRAD_FASTMATH_INLINE void probs_rows_f32_body(float* X, std::size_t ldx, std::size_t r0, std::size_t r1,
                                               std::size_t c, std::size_t S, std::size_t b, std::size_t h,
                                               const MaskView<float>& m, const float* stats) {
  probs_rows_impl<float>(X, ldx, r0, r1, c, S, b, h, m, stats);
}
XGRAD_ISA_KERNEL(probs_rows_f32,
                 (float* X, std::size_t ldx, std::size_t r0, std::size_t r1, std::size_t c, std::size_t S,
                  std::size_t b, std::size_t h, const MaskView<float>& m, const float* stats),
                 (X, ldx, r0, r1, c, S, b, h, m, stats))
XGRAD_FASTMATH_INLINE void softmax_grad_rows_f32_body(const float* P, std::size_t ldp, float* G, std::size_t ldg,
                                                      std::size_t r, std::size_t c) {
  softmax_grad_rows_impl<float>(P, ldp, G, ldg, r, c);
}
XGRAD_ISA_KERNEL(softmax_grad_rows_f32,
                 (const float* P, std::size_t ldp, float* G, std::size_t ldg, std::size_t r, std::size_t c),
                 (P, ldp, G, ldg, r, c))

#ifdef XGRAD_AVX512_ROWS
// Rows of at most 16 keys on the AVX-512 path (the reverse model's heads: 16 keys a query; the
// AVX2 path's variants follow),
// each row one register: the generic kernels above, compiled for AVX-512, reduce such a row
// through the stack (scalar adds, store-forwarding stalls) at ~140 cycles a row. These do the
// same operations in the same order, so they give the same bits (test attention_op/
// float32_attention_is_the_same_bits_on_the_avx2_and_avx512_paths):
//   row max: lanes max(x_j, -inf), then folded in halves 8, 4, 2, 1 (x86 max(b, a) is
//            `a < b ? b : a`, row_max's select, NaN and signed zeros included)
//   sum:     ((0 + e_0) + e_1) + ... + e_15 in order of j (exp_shifted_sum with one block):
//            a group's 16 rows transposed, so that the 16 chains run side by side in one register
//   dot:     lane_sum's halves 8, 4, 2, 1 over the lanes 0 + g_j p_j (lanes >= c: 0), the
//            product and the sum in separate statements as there: whether they are fused is
//            then the compiler's choice in both (GCC fuses across statements, clang does not)

// The row max as row_max(x, 16) forms it: `a < b ? b : a` lane-wise, the same select; the 16
// lanes as two halves (lanes 0-7, 8-15: AVX2) or one register (AVX-512).
XGRAD_TARGET_AVX2 inline float row_max16(__m256 lo, __m256 hi) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  lo = ninf < lo ? lo : ninf, hi = ninf < hi ? hi : ninf;
  const __m256 m8 = lo < hi ? hi : lo;
  const __m128 lo4 = detail::low4(m8), hi4 = detail::high4(m8);
  const __m128 m4 = lo4 < hi4 ? hi4 : lo4;
  const float m2[2] = {m4[0] < m4[2] ? m4[2] : m4[0], m4[1] < m4[3] ? m4[3] : m4[1]};
  return m2[0] < m2[1] ? m2[1] : m2[0];
}
XGRAD_TARGET_AVX512 inline float row_max16_avx512(__m512 v) { return row_max16(detail::low8(v), detail::high8(v)); }

// softmax_rows_impl for c <= 16 keys (storage of 16 floats a row).
XGRAD_TARGET_AVX512 void softmax_rows_short_avx512(float* X, std::size_t ldx, std::size_t r0, std::size_t r1,
                                                   std::size_t c, std::size_t S, std::size_t b, std::size_t h,
                                                   const MaskView<float>& m, float* stats) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const __m512 vninf = _mm512_set1_ps(ninf);
  // batch b's padding keys as lanes, for rows with no other mask (one lookup per call, not per row)
  const bool* pr = m.padding ? m.padding + b * S : nullptr;
  __mmask16 padding = 0;
  for (std::size_t j = 0; pr && j < c; ++j) padding = __mmask16(padding | (unsigned(pr[j]) << j));
  const bool lanes_only = !m.add && !m.mask;
  alignas(64) float et[16 * 16];  // a group's exps transposed: et[j * 16 + row]
  for (std::size_t g0 = r0; g0 < r1; g0 += 16) {
    const std::size_t g1 = std::min(r1, g0 + 16), rows = g1 - g0;
    float mx[16];
    for (std::size_t i = g0; i < g1; ++i) {  // mask and max
      float* x = X + (i - r0) * ldx;
      const std::size_t n = visible_keys(m, i, c);
      if (n == 0) {  // padded(n) = 0: the keys zeroed, nothing visible
        std::fill(x, x + c, 0.0f);
        mx[i - g0] = ninf;
        continue;
      }
      __m512 v;
      if (lanes_only && !(pr && m.skip_queries && pr[i])) {
        const __mmask16 past = n >= 16 ? __mmask16(0) : __mmask16(0xffffu << n);
        v = _mm512_mask_mov_ps(_mm512_loadu_ps(x), __mmask16(past | padding), vninf);
        _mm512_storeu_ps(x, v);
      } else {
        mask_row(x, i, n, 16, b, h, S, m);
        v = _mm512_loadu_ps(x);
      }
      mx[i - g0] = row_max16_avx512(v);
    }
    for (std::size_t i = g0; i < g1; ++i) {  // exps (rows with nothing visible: zeros)
      float* x = X + (i - r0) * ldx;
      const float mi = mx[i - g0];
      if (mi == ninf) {
        if (visible_keys(m, i, c) > 0) _mm512_storeu_ps(x, _mm512_setzero_ps());
        continue;
      }
      for (std::size_t j = 0; j < 16; ++j) x[j] = exp_shifted(x[j] - mi);
    }
    if (rows < 16) std::fill(et, et + 16 * 16, 0.0f);
    detail::transpose(rows, 16, X + (g0 - r0) * ldx, ldx, et, 16);
    __m512 total = _mm512_setzero_ps();
    for (std::size_t j = 0; j < 16; ++j) total = _mm512_add_ps(total, _mm512_load_ps(et + 16 * j));
    alignas(64) float inv[16];
    _mm512_store_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), total));
    for (std::size_t i = g0; i < g1; ++i) {  // scale, statistics
      float* st = stats + 2 * (i - r0);
      set_nothing_visible(st);
      if (mx[i - g0] == ninf) continue;
      st[0] = mx[i - g0], st[1] = inv[i - g0];
      float* x = X + (i - r0) * ldx;
      _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(inv[i - g0])));
    }
  }
}

// softmax_grad_rows_impl for c <= 16 keys.
XGRAD_TARGET_AVX512 void softmax_grad_rows_short_avx512(const float* P, std::size_t ldp, float* G, std::size_t ldg,
                                                        std::size_t r, std::size_t c) {
  const __mmask16 keys = __mmask16((1u << c) - 1);
  for (std::size_t i = 0; i < r; ++i) {
    const __m512 p = _mm512_maskz_loadu_ps(keys, P + i * ldp), g = _mm512_maskz_loadu_ps(keys, G + i * ldg);
    const __m512 gp = g * p;  // lane_sum's f(j), then added into its lane (fused or not as the compiler fuses there)
    const __m512 acc = _mm512_setzero_ps() + gp;
    const __m512 dot = _mm512_set1_ps(detail::lane_halves16(acc));
    _mm512_mask_storeu_ps(G + i * ldg, keys, _mm512_mul_ps(p, _mm512_sub_ps(g, dot)));
  }
}

// The same two kernels on the AVX2 path, a row of 16 keys in two registers (lanes 0-7, 8-15):
// the same operations in the same order as above (row_max16 and lane_halves16 on the halves),
// so the same bits; the
// generic kernels on AVX2 took ~7% of the reverse model's dense training step (these: the step
// 5.2% faster dense, 2.0% with the padding skipped, process-alternating runs on the Xeon's AVX2
// path; test attention_op/float32_short_rows_are_the_same_bits_as_the_generic_kernels).
// Lanes l < 8 of the 16-bit set `bits` (lo) or lanes 8 + l (hi) as all-ones 32-bit lanes.
XGRAD_TARGET_AVX2 inline __m256i lane_bits_avx2(unsigned bits, bool hi) {
  const __m256i sel = hi ? _mm256_setr_epi32(1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15)
                         : _mm256_setr_epi32(1, 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(bits)), sel), sel);
}

XGRAD_TARGET_AVX2 void softmax_rows_short_avx2(float* X, std::size_t ldx, std::size_t r0, std::size_t r1,
                                               std::size_t c, std::size_t S, std::size_t b, std::size_t h,
                                               const MaskView<float>& m, float* stats) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const __m256 vninf = _mm256_set1_ps(ninf);
  const bool* pr = m.padding ? m.padding + b * S : nullptr;
  unsigned padding = 0;
  for (std::size_t j = 0; pr && j < c; ++j) padding |= unsigned(pr[j]) << j;
  const bool lanes_only = !m.add && !m.mask;
  alignas(64) float et[16 * 16];  // a group's exps transposed: et[j * 16 + row]
  for (std::size_t g0 = r0; g0 < r1; g0 += 16) {
    const std::size_t g1 = std::min(r1, g0 + 16), rows = g1 - g0;
    float mx[16];
    for (std::size_t i = g0; i < g1; ++i) {  // mask and max
      float* x = X + (i - r0) * ldx;
      const std::size_t n = visible_keys(m, i, c);
      if (n == 0) {
        std::fill(x, x + c, 0.0f);
        mx[i - g0] = ninf;
        continue;
      }
      __m256 lo, hi;
      if (lanes_only && !(pr && m.skip_queries && pr[i])) {
        const unsigned hidden = (n >= 16 ? 0u : 0xffffu << n) | padding;
        lo = _mm256_blendv_ps(_mm256_loadu_ps(x), vninf, _mm256_castsi256_ps(lane_bits_avx2(hidden, false)));
        hi = _mm256_blendv_ps(_mm256_loadu_ps(x + 8), vninf, _mm256_castsi256_ps(lane_bits_avx2(hidden, true)));
        _mm256_storeu_ps(x, lo), _mm256_storeu_ps(x + 8, hi);
      } else {
        mask_row(x, i, n, 16, b, h, S, m);
        lo = _mm256_loadu_ps(x), hi = _mm256_loadu_ps(x + 8);
      }
      mx[i - g0] = row_max16(lo, hi);
    }
    for (std::size_t i = g0; i < g1; ++i) {  // exps (rows with nothing visible: zeros)
      float* x = X + (i - r0) * ldx;
      const float mi = mx[i - g0];
      if (mi == ninf) {
        if (visible_keys(m, i, c) > 0) _mm256_storeu_ps(x, _mm256_setzero_ps()), _mm256_storeu_ps(x + 8, _mm256_setzero_ps());
        continue;
      }
      for (std::size_t j = 0; j < 16; ++j) x[j] = exp_shifted(x[j] - mi);
    }
    if (rows < 16) std::fill(et, et + 16 * 16, 0.0f);
    detail::transpose(rows, 16, X + (g0 - r0) * ldx, ldx, et, 16);
    __m256 total_lo = _mm256_setzero_ps(), total_hi = _mm256_setzero_ps();
    for (std::size_t j = 0; j < 16; ++j)
      total_lo = _mm256_add_ps(total_lo, _mm256_load_ps(et + 16 * j)),
      total_hi = _mm256_add_ps(total_hi, _mm256_load_ps(et + 16 * j + 8));
    alignas(32) float inv[16];
    _mm256_store_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), total_lo));
    _mm256_store_ps(inv + 8, _mm256_div_ps(_mm256_set1_ps(1.0f), total_hi));
    for (std::size_t i = g0; i < g1; ++i) {  // scale, statistics
      float* st = stats + 2 * (i - r0);
      set_nothing_visible(st);
      if (mx[i - g0] == ninf) continue;
      st[0] = mx[i - g0], st[1] = inv[i - g0];
      float* x = X + (i - r0) * ldx;
      const __m256 s = _mm256_set1_ps(inv[i - g0]);
      _mm256_storeu_ps(x, _mm256_mul_ps(_mm256_loadu_ps(x), s));
      _mm256_storeu_ps(x + 8, _mm256_mul_ps(_mm256_loadu_ps(x + 8), s));
    }
  }
}

XGRAD_TARGET_AVX2 void softmax_grad_rows_short_avx2(const float* P, std::size_t ldp, float* G, std::size_t ldg,
                                                    std::size_t r, std::size_t c) {
  const unsigned keys = (1u << c) - 1;
  const __m256i klo = lane_bits_avx2(keys, false), khi = lane_bits_avx2(keys, true);
  const std::size_t n_lo = std::min<std::size_t>(c, 8), n_hi = c - n_lo;  // keys in each half (store_first)
  for (std::size_t i = 0; i < r; ++i) {
    const float *pi = P + i * ldp, *gi = G + i * ldg;
    const __m256 plo = _mm256_maskload_ps(pi, klo), phi = _mm256_maskload_ps(pi + 8, khi);
    const __m256 glo = _mm256_maskload_ps(gi, klo), ghi = _mm256_maskload_ps(gi + 8, khi);
    const __m256 gplo = glo * plo, gphi = ghi * phi;  // as there: lane_sum's f(j), added into its lane
    const __m256 alo = _mm256_setzero_ps() + gplo, ahi = _mm256_setzero_ps() + gphi;
    const __m256 dot = _mm256_set1_ps(detail::lane_halves16(alo, ahi));
    detail::store_first(G + i * ldg, _mm256_mul_ps(plo, _mm256_sub_ps(glo, dot)), n_lo);
    detail::store_first(G + i * ldg + 8, _mm256_mul_ps(phi, _mm256_sub_ps(ghi, dot)), n_hi);
  }
}
#endif

template <class T>
void softmax_rows(T* X, std::size_t ldx, std::size_t r0, std::size_t r1, std::size_t c, std::size_t S, std::size_t b,
                  std::size_t h, const MaskView<T>& m, T* stats) {
#ifdef XGRAD_AVX512_ROWS
  if constexpr (std::is_same_v<T, float>)
    if (c > 0 && c <= 16 && cpu_path() != CpuPath::Baseline)
      return cpu_path() == CpuPath::Avx512 ? softmax_rows_short_avx512(X, ldx, r0, r1, c, S, b, h, m, stats)
                                           : softmax_rows_short_avx2(X, ldx, r0, r1, c, S, b, h, m, stats);
#endif
  if constexpr (std::is_same_v<T, float>) softmax_rows_f32(X, ldx, r0, r1, c, S, b, h, m, stats);
  else softmax_rows_impl<T>(X, ldx, r0, r1, c, S, b, h, m, stats);
}
template <class T>
void probs_rows(T* X, std::size_t ldx, std::size_t r0, std::size_t r1, std::size_t c, std::size_t S, std::size_t b,
                std::size_t h, const MaskView<T>& m, const T* stats) {
  if constexpr (std::is_same_v<T, float>) probs_rows_f32(X, ldx, r0, r1, c, S, b, h, m, stats);
  else probs_rows_impl<T>(X, ldx, r0, r1, c, S, b, h, m, stats);
}
template <class T>
void softmax_grad_rows(const T* P, std::size_t ldp, T* G, std::size_t ldg, std::size_t r, std::size_t c) {
#ifdef XGRAD_AVX512_ROWS
  if constexpr (std::is_same_v<T, float>)
    if (c > 0 && c <= 16 && cpu_path() != CpuPath::Baseline)
      return cpu_path() == CpuPath::Avx512 ? softmax_grad_rows_short_avx512(P, ldp, G, ldg, r, c)
                                           : softmax_grad_rows_short_avx2(P, ldp, G, ldg, r, c);
#endif
  if constexpr (std::is_same_v<T, float>) softmax_grad_rows_f32(P, ldp, G, ldg, r, c);
  else softmax_grad_rows_impl<T>(P, ldp, G, ldg, r, c);
}

// The head products: C (M, N) = alpha op(A) Bk + beta C, with Bk (K, N) read as rows (row
// stride ldb): K and V over the keys packed once per head, a row block's Q and dO (head_rows),
// P and dS (K^T and V^T: keys_gemm below). In place, each row of K, V, Q or dO sits in its own stretch of a wide
// row (stride 3E for packed qkv), at a stride that maps them all to a few L1 sets, and the
// micro-kernel's loads then stall on memory. float32 runs xgrad's own micro-kernels
// (detail::tiled_gemm: no per-call packing; the same bits on the AVX-512 and AVX2 paths),
// float64 BLAS.
template <class T>
void head_gemm(bool trans_a, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A, std::size_t lda,
               const T* Bk, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  if constexpr (std::is_same_v<T, float>) detail::tiled_gemm(trans_a, M, N, K, alpha, A, lda, Bk, ldb, beta, C, ldc);
  else detail::gemm<T>(trans_a, false, M, N, K, alpha, A, lda, Bk, ldb, beta, C, ldc);
}

using detail::panel_stride;
// Row stride of a row block's probabilities over c keys (and of its dP, dS): panel_stride(c),
// or for c <= 16 (a row's padded(c) = 16 elements) 16: the rows back to back, where
// panel_stride's extra 16 doubled the memory the short rows' probabilities take (the reverse
// model: 512 KiB a layer instead of 256) and what the forward writes and the backward reads.
constexpr std::size_t prob_stride(std::size_t c) { return c <= 16 ? 16 : panel_stride(c); }

// Rows [0, n) of x (width elements each, row stride ldx) into panel, row stride ld: as they
// are, (n, width); or transposed, (width, n) (dK^T, dV^T back into dK, dV; float64's K^T, V^T).
template <class T>
void pack_rows(const T* x, std::size_t ldx, std::size_t n, std::size_t width, bool transposed, T* panel,
               std::size_t ld) {
  if (!transposed) {
    for (std::size_t s = 0; s < n; ++s) std::copy_n(x + s * ldx, width, panel + s * ld);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    detail::transpose(n, width, x, ldx, panel, ld);
  } else {
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t j = 0; j < width; ++j) panel[j * ld + s] = x[s * ldx + j];
  }
}
// K^T and V^T of a head, the B of the score and dP products: float32 in column panels
// (detail::pack_bpanels; as rows (D, n) at a stride of the keys, every column block of a product
// started with D cache misses a row apart: the score products at 4,096 keys 77 against 89
// GFLOP/s), float64 as rows at row stride ld. keys_gemm reads either:
//   C (r, c) = alpha A (r, D) X^T[:, :c]      X^T = K^T or V^T, c <= n
// Panels of `width` columns: detail::bpanel_width(), read once per kernel call for both.
template <class T>
void pack_keys_transposed(HeadView<const T> x, std::size_t b, std::size_t h, std::size_t n, T* panel,
                          std::size_t ld, std::size_t width) {
  if constexpr (std::is_same_v<T, float>) detail::pack_bpanels(true, x.width, n, x.at(b, h, 0), x.ld, panel, width);
  else pack_rows(x.at(b, h, 0), x.ld, n, x.width, true, panel, ld);
}
template <class T>
void keys_gemm(std::size_t r, std::size_t c, std::size_t D, T alpha, const T* A, std::size_t lda, const T* keys_t,
               std::size_t ld, std::size_t width, T* C, std::size_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    detail::tiled_gemm_bpanels(false, r, c, D, alpha, A, lda, keys_t, width, T(0), C, ldc);
  else head_gemm<T>(false, r, c, D, alpha, A, lda, keys_t, ld, T(0), C, ldc);
}

// Keys packed into K^T, V^T (pack_keys_transposed) for the c_all keys the GEMMs read: c_all
// rounded up to whole 16-key blocks within the S keys (the extra columns are never read), so a
// head of under 16 keys (a padded batch) is one 16 x 16 register transpose instead of the
// narrower variants' edges.
// Packed rows (attention_packed_rows) have no rows past L_b = c_all (the next batch's, or the
// end of the buffer): exactly c_all there.
template <class T>
std::size_t transposed_keys(const HeadView<const T>& x, std::size_t c_all, std::size_t S) {
  return x.stores_padding() ? std::min(S, padded(c_all)) : c_all;
}

// Rows [r0, r0 + n) of head (b, h) of x.
template <class T>
void pack_head(HeadView<const T> x, std::size_t b, std::size_t h, std::size_t r0, std::size_t n, T* panel,
               std::size_t ld) {
  pack_rows(x.at(b, h, r0), x.ld, n, x.width, false, panel, ld);
}

// Rows [r0, r0 + n) of head (b, h) of x as the head GEMMs read them (pointer, row stride):
// in place when there are few (n <= 16: even at a power-of-two stride they fit the L1 sets they
// map to, and a copy costs more than it saves), else copied into panel (row stride ld).
template <class T>
std::pair<const T*, std::size_t> head_rows(HeadView<const T> x, std::size_t b, std::size_t h, std::size_t r0,
                                           std::size_t n, T* panel, std::size_t ld) {
  if (n <= 16) return {x.at(b, h, r0), x.ld};
  pack_head(x, b, h, r0, n, panel, ld);
  return {panel, ld};
}

// Multiply-adds of one head's forward (the GEMMs; the softmax is of the order T S).
std::size_t head_cost(const Dims& d) { return d.T * d.S * (d.D + d.Dv + 1); }

// Keys [0, c) a row block of batch b ending at query row r1 computes: with is_causal the
// later keys are the masked future of every row in it; keys after batch b's last unpadded
// key are padding for every row.
template <class T>
std::size_t block_keys(const Dims& d, const MaskView<T>& m, std::size_t b, std::size_t r1) {
  const std::size_t c = m.causal ? std::min(d.S, r1) : d.S;
  return m.key_end ? std::min(c, m.key_end[b]) : c;
}

// Where the forward keeps the probabilities for the backward: each computed row block's (r, c)
// probabilities, row stride prob_stride(c), back to back by (b, h) and then row block, so the
// keys no block computes (the causal future, padding) take no memory (large's causal
// (4, 8, 512, 512): 19.9 MB where (B, H, T, S) rows take 34.6). Every head of batch b has the
// same blocks, head_elems[b] elements.
struct KeptLayout {
  std::vector<std::size_t> batch_first, head_elems;  // (B) each
  std::size_t total = 0;                             // elements
  std::size_t head(std::size_t b, std::size_t h) const { return batch_first[b] + h * head_elems[b]; }
};
template <class T>
KeptLayout kept_layout(const Dims& d, const MaskView<T>& m) {
  KeptLayout l;
  for (std::size_t b = 0; b < d.B; ++b) {
    std::size_t elems = 0;
    for (std::size_t r0 = 0, t_end = query_end(d, m, b); r0 < t_end; r0 += kRowBlock) {
      const std::size_t r1 = std::min(t_end, r0 + kRowBlock);
      elems += (r1 - r0) * prob_stride(block_keys(d, m, b, r1));
    }
    l.batch_first.push_back(l.total), l.head_elems.push_back(elems);
    l.total += d.H * elems;
  }
  return l;
}

// out (B, T, H*Dv) and the row statistics stats (B, H, T, 2) = (max, 1 / sum) of every
// query's softmax (skipped padding queries: out 0, set_nothing_visible). A row block's
// probabilities (r, c), row stride prob_stride(c), are computed in place: in `saved` (laid
// out as `kept` says) when it is given, else in a (kRowBlock, S) scratch. The GEMMs and the
// softmax do the same operations either way, so the bits do not depend on where they are kept.
template <class T>
void forward_kernel(const Dims& d, T scale, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                    const MaskView<T>& m, T* stats, T* saved, const KeptLayout& kept, HeadView<T> out) {
  parallel_for(d.B * d.H, head_cost(d), [&](std::size_t begin, std::size_t end) {
    const auto scratch =  // uninitialised
        detail::aligned_buffer<T>(saved ? 0 : std::min(kRowBlock, d.T) * panel_stride(d.S));
    // K^T (D, c_all; pack_keys_transposed) and V (c_all, Dv), packed; a row block's Q (r, D), none when every block
    // has at most 16 rows (head_rows reads those in place)
    const std::size_t ldk = panel_stride(d.S), ldv = panel_stride(d.Dv), ldq = panel_stride(d.D);
    const std::size_t rows = std::min(kRowBlock, d.T), width = detail::bpanel_width();
    const auto kt = detail::aligned_buffer<T>(d.D * ldk), vr = detail::aligned_buffer<T>(d.S * ldv),
               qb = detail::aligned_buffer<T>(rows > 16 ? rows * ldq : 0);
    for (std::size_t bh = begin; bh < end; ++bh) {
      const std::size_t b = bh / d.H, h = bh % d.H, t_end = query_end(d, m, b);
      for (std::size_t i = t_end; i < d.T; ++i) {  // skipped padding queries: nothing visible
        if (out.stores_padding()) std::fill_n(out.at(b, h, i), d.Dv, T(0));
        set_nothing_visible(stats + 2 * (bh * d.T + i));
      }
      const std::size_t c_all = t_end == 0 ? 0 : block_keys(d, m, b, t_end);  // keys any row block computes
      pack_keys_transposed(k, b, h, transposed_keys(k, c_all, d.S), kt.get(), ldk, width);
      const auto [vp, ldvp] = head_rows(v, b, h, 0, c_all, vr.get(), ldv);
      T* P = saved ? saved + kept.head(b, h) : scratch.get();  // the row block's
      for (std::size_t r0 = 0; r0 < t_end; r0 += kRowBlock) {
        const std::size_t r1 = std::min(t_end, r0 + kRowBlock), r = r1 - r0, c = block_keys(d, m, b, r1);
        const std::size_t ldp = prob_stride(c);
        const auto [qp, ldqp] = head_rows(q, b, h, r0, r, qb.get(), ldq);
        keys_gemm<T>(r, c, d.D, scale, qp, ldqp, kt.get(), ldk, width, P, ldp);
        softmax_rows(P, ldp, r0, r1, c, d.S, b, h, m, stats + 2 * (bh * d.T + r0));
        head_gemm<T>(false, r, d.Dv, c, T(1), P, ldp, vp, ldvp, T(0), out.at(b, h, r0), out.ld);
        if (saved) P += r * ldp;
      }
    }
  });
}

// Gradients into dq, dk, dv (a view with base nullptr is skipped), every element written.
// Each row block's probabilities are read from `saved` when the forward kept them, else
// recomputed from q, k and the row statistics (the same bits either way).
template <class T>
void backward_kernel(const Dims& d, T scale, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                     const T* stats, const T* saved, const KeptLayout& kept, const MaskView<T>& m,
                     HeadView<const T> dout, HeadView<T> dq, HeadView<T> dk, HeadView<T> dv) {
  parallel_for(d.B * d.H, 3 * head_cost(d), [&](std::size_t begin, std::size_t end) {
    const std::size_t scratch = std::min(kRowBlock, d.T) * panel_stride(d.S);
    // (r, c), row stride prob_stride(c); uninitialised (every GEMM here writes all of its C with beta 0)
    const auto P = detail::aligned_buffer<T>(saved ? 0 : scratch), dP = detail::aligned_buffer<T>(scratch);
    // K^T (D, c_all), V^T (Dv, c_all) (pack_keys_transposed), K (c_all, D), packed
    const std::size_t ldt = panel_stride(d.S), ldk = panel_stride(d.D), width = detail::bpanel_width();
    const auto kt = detail::aligned_buffer<T>(saved ? 0 : d.D * ldt), vt = detail::aligned_buffer<T>(d.Dv * ldt),
               kr = detail::aligned_buffer<T>(d.S * ldk);
    // dK^T (D, c_all) and dV^T (Dv, c_all), summed over the row blocks and then stored
    // transposed; a row block's Q (r, D) and dO (r, Dv), none when every block has at most 16
    // rows (head_rows reads those in place)
    const std::size_t ldv = panel_stride(d.Dv), rows = std::min(kRowBlock, d.T), panel_rows = rows > 16 ? rows : 0;
    const auto dkt = detail::aligned_buffer<T>(dk.base ? d.D * ldt : 0),
               dvt = detail::aligned_buffer<T>(dv.base ? d.Dv * ldt : 0),
               qb = detail::aligned_buffer<T>(panel_rows * ldk), dob = detail::aligned_buffer<T>(panel_rows * ldv);
    for (std::size_t bh = begin; bh < end; ++bh) {
      const std::size_t b = bh / d.H, h = bh % d.H, t_end = query_end(d, m, b);
      // Row blocks from the last: its keys [0, c) include every earlier block's, so its
      // GEMMs initialise dK, dV (beta 0) and the rest accumulate; keys no query sees get 0,
      // and so do the skipped padding queries.
      const std::size_t c_all = t_end == 0 ? 0 : block_keys(d, m, b, t_end);
      // dK, dV as dK^T, dV^T (their GEMMs then read P and dS as rows, B, where dS^T Q, P^T dO
      // would read them as A^T, a column at a time at the rows' stride) when over 16 keys; then
      // stored transposed once per head. Either way the same elements, so the same bits.
      const bool transposed_grads = c_all > 16;
      for (std::size_t s = c_all; s < d.S; ++s) {  // packed rows: c_all = L_b, no such key rows
        if (dk.base && dk.stores_padding()) std::fill_n(dk.at(b, h, s), d.D, T(0));
        if (dv.base && dv.stores_padding()) std::fill_n(dv.at(b, h, s), d.Dv, T(0));
      }
      if (!saved) pack_keys_transposed(k, b, h, transposed_keys(k, c_all, d.S), kt.get(), ldt, width);
      if (dq.base || dk.base) pack_keys_transposed(v, b, h, transposed_keys(v, c_all, d.S), vt.get(), ldt, width);
      const auto [kp, ldkp] = dq.base ? head_rows(k, b, h, 0, c_all, kr.get(), ldk) : std::pair<const T*, std::size_t>{};
      if (dq.base && dq.stores_padding())
        for (std::size_t i = t_end; i < d.T; ++i) std::fill_n(dq.at(b, h, i), d.D, T(0));
      const T* kept_end = saved ? saved + kept.head(b, h) + kept.head_elems[b] : nullptr;  // past the last block's
      for (std::size_t blk = (t_end + kRowBlock - 1) / kRowBlock; blk-- > 0;) {
        const std::size_t r0 = blk * kRowBlock;
        const std::size_t r1 = std::min(t_end, r0 + kRowBlock), r = r1 - r0, c = block_keys(d, m, b, r1);
        const T beta = r1 == t_end ? T(0) : T(1);
        const auto [dO, lddo] = head_rows(dout, b, h, r0, r, dob.get(), ldv);
        const std::size_t ldp = prob_stride(c), ldg = ldp;
        const T* Pr = saved ? (kept_end -= r * ldp) : P.get();
        const auto [qp, ldqp] = !saved || dk.base ? head_rows(q, b, h, r0, r, qb.get(), ldk)
                                                  : std::pair<const T*, std::size_t>{};
        if (!saved) {
          keys_gemm<T>(r, c, d.D, scale, qp, ldqp, kt.get(), ldt, width, P.get(), ldp);
          probs_rows(P.get(), ldp, r0, r1, c, d.S, b, h, m, stats + 2 * (bh * d.T + r0));
        }
        // dS before dV^T: the softmax backward is the first to read the kept probabilities, row
        // by row, and dV^T's GEMM then finds them in cache instead of missing on 64 row streams
        // at once (large, per call: dV^T 10.2 -> 7.6 ms, the softmax backward 1.3 -> 3.6 ms).
        if (dq.base || dk.base) {
          keys_gemm<T>(r, c, d.Dv, T(1), dO, lddo, vt.get(), ldt, width, dP.get(), ldg);
          softmax_grad_rows(Pr, ldp, dP.get(), ldg, r, c);
        }
        if (dv.base && transposed_grads) head_gemm<T>(true, d.Dv, c, r, T(1), dO, lddo, Pr, ldp, beta, dvt.get(), ldt);
        if (dv.base && !transposed_grads) head_gemm<T>(true, c, d.Dv, r, T(1), Pr, ldp, dO, lddo, beta, dv.at(b, h), dv.ld);
        if (!dq.base && !dk.base) continue;
        if (dq.base) head_gemm<T>(false, r, d.D, c, scale, dP.get(), ldg, kp, ldkp, T(0), dq.at(b, h, r0), dq.ld);
        if (!dk.base) continue;
        if (transposed_grads) head_gemm<T>(true, d.D, c, r, scale, qp, ldqp, dP.get(), ldg, beta, dkt.get(), ldt);
        else head_gemm<T>(true, c, d.D, r, scale, dP.get(), ldg, qp, ldqp, beta, dk.at(b, h), dk.ld);
      }
      if (dk.base && transposed_grads) pack_rows(dkt.get(), ldt, d.D, c_all, true, dk.at(b, h), dk.ld);
      if (dv.base && transposed_grads) pack_rows(dvt.get(), ldt, d.Dv, c_all, true, dv.at(b, h), dv.ld);
    }
  });
}

// --- argument checks ---------------------------------------------------------------------

std::string qkv_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape());
}

Dims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, std::size_t H) {
  check_same_float(op, "q", q, "k", k);
  check_same_float(op, "q", q, "v", v);
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3)
    throw_error<ShapeError>(op, "arguments 'q', 'k', 'v' must have rank 3, (B, L, features); got ",
                            qkv_shapes(q, k, v));
  Dims d;
  d.B = q.shape()[0], d.T = q.shape()[1], d.S = k.shape()[1], d.H = H;
  if (k.shape()[0] != d.B || v.shape()[0] != d.B || v.shape()[1] != d.S || k.shape()[2] != q.shape()[2])
    throw_error<ShapeError>(op, "arguments must be q (B, T, E), k (B, S, E), v (B, S, Ev); got ", qkv_shapes(q, k, v));
  if (H == 0 || q.shape()[2] % H != 0 || v.shape()[2] % H != 0)
    throw_error<ShapeError>(op, "num_heads ", H, " must divide the features of q and v; got ", qkv_shapes(q, k, v));
  d.D = q.shape()[2] / H, d.Dv = v.shape()[2] / H;
  return d;
}

// --- masks that are causal in content ------------------------------------------------------

// What a bool or additive mask does to scores (B, H, T, S), from its content: `masked(x)` is
// true = -inf for a bool true or an additive -inf; `neutral(x)` for a bool false or an additive 0.
enum class MaskContent {
  Other,
  Nothing,      // masks nothing and adds nothing: the same as no mask
  Causal,       // exactly the causal future (key j > query i): the same as is_causal
  CausalPlus,   // the causal future and more: is_causal plus the mask
};

template <class E, class Masked, class Neutral>
MaskContent classify_mask(const E* x, const std::array<std::size_t, 4>& st, const Dims& d, Masked masked,
                          Neutral neutral) {
  bool future_masked = true, future_neutral = true, past_neutral = true;
  for (std::size_t b = 0; b < (st[0] ? d.B : 1); ++b)
    for (std::size_t h = 0; h < (st[1] ? d.H : 1); ++h)
      for (std::size_t i = 0; i < (st[2] ? d.T : 1); ++i) {
        const E* row = x + b * st[0] + h * st[1] + i * st[2];
        // Without a query stride every query reads row 0: its "future" starts at key 1 for
        // query 0 only, so that case is causal only for T == 1.
        const std::size_t split = std::min(d.S, i + 1);
        for (std::size_t j = 0; j < split; ++j) past_neutral = past_neutral && neutral(row[j * st[3]]);
        for (std::size_t j = split; j < d.S; ++j) {
          const E v = row[j * st[3]];
          future_masked = future_masked && masked(v);
          future_neutral = future_neutral && neutral(v);
        }
        if (!future_masked && !(past_neutral && future_neutral)) return MaskContent::Other;
      }
  if (!st[2] && d.T > 1) future_masked = false;  // one row for every query: not causal
  if (past_neutral && future_neutral) return MaskContent::Nothing;
  if (future_masked) return past_neutral ? MaskContent::Causal : MaskContent::CausalPlus;
  return MaskContent::Other;
}

// classify_mask over a mask tensor ((T, S) or 4-D), remembered for the last few masks seen:
// a mask built once and passed to every call (a model's causal mask) is scanned once. An
// entry matches while its storage is alive and unmodified (Tensor::version) and the shape
// is the same.
MaskContent mask_content(const Tensor& mask, const Dims& d) {
  struct Entry {
    std::weak_ptr<Storage> storage;
    const Storage* key = nullptr;
    std::uint64_t version = 0;
    Shape shape, scores;
    MaskContent content = MaskContent::Other;
  };
  static std::mutex mu;
  static std::array<Entry, 8> cache;
  static std::size_t next = 0;
  const std::shared_ptr<Storage>& storage = mask.impl()->value;
  const Shape scores{d.B, d.H, d.T, d.S};
  {
    std::lock_guard<std::mutex> lk(mu);
    for (const Entry& e : cache)
      if (e.key == storage.get() && !e.storage.expired() && e.storage.lock() == storage &&
          e.version == storage->version && e.shape == mask.shape() && e.scores == scores)
        return e.content;
  }
  const auto st = strides4(mask.shape(), scores);
  MaskContent content;
  if (mask.dtype() == DType::Bool) {
    content = classify_mask(mask.data<bool>(), st, d, [](bool v) { return v; }, [](bool v) { return !v; });
  } else {
    content = dispatch_float("attention", mask.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T ninf = -std::numeric_limits<T>::infinity();
      return classify_mask(data_of<T>(mask), st, d, [ninf](T v) { return v == ninf; },
                           [](T v) { return v == T(0); });
    });
  }
  std::lock_guard<std::mutex> lk(mu);
  cache[next] = {storage, storage.get(), storage->version, mask.shape(), scores, content};
  next = (next + 1) % cache.size();
  return content;
}

// A bool mask or constant additive mask that is causal in content takes the is_causal path
// (future key blocks skipped); one that masks exactly that, or nothing, is dropped.
void simplify_masks(AttentionMasks& m, const Dims& d) {
  if (d.T == 0 || d.S == 0) return;
  auto simplify = [&](Tensor& mask) {
    if (!mask.defined() || mask.requires_grad()) return;
    switch (mask_content(mask, d)) {
      case MaskContent::Nothing: mask = Tensor(); break;
      case MaskContent::Causal: mask = Tensor(), m.is_causal = true; break;
      case MaskContent::CausalPlus: m.is_causal = true; break;
      case MaskContent::Other: break;
    }
  };
  simplify(m.mask);
  simplify(m.float_mask);
}

// The masks with `mask` and `float_mask` in the shapes the kernels read: (T, S) or 4-D.
// `input` names the argument whose dtype is `dtype` ("q" or "qkv").
AttentionMasks check_masks(const char* op, const AttentionMasks& in, const Dims& d, DType dtype, const char* input) {
  const Shape full{d.B, d.H, d.T, d.S};
  AttentionMasks m = in;
  if (m.mask.defined()) {
    if (m.mask.dtype() != DType::Bool)
      throw_error<DTypeError>(op, "argument 'mask' must be a bool mask, got ", dtype_name(m.mask.dtype()), " of shape ",
                              m.mask.shape());
    m.mask = check_attention_mask_shape(op, "mask", m.mask, full);
  }
  if (m.key_padding_mask.defined()) {
    if (m.key_padding_mask.dtype() != DType::Bool)
      throw_error<DTypeError>(op, "argument 'key_padding_mask' must be bool (true = padding), got ",
                              dtype_name(m.key_padding_mask.dtype()), " of shape ", m.key_padding_mask.shape());
    check_shape(op, "key_padding_mask", m.key_padding_mask, {d.B, d.S}, "(B, S)");
  }
  if (m.skip_padded_queries && (!m.key_padding_mask.defined() || d.T != d.S))
    throw_error<ValueError>(op, "skip_padded_queries needs a key_padding_mask and as many queries as keys (self-attention); got ",
                            d.T, " queries, ", d.S, " keys", m.key_padding_mask.defined() ? "" : " and no key_padding_mask");
  if (m.float_mask.defined()) {
    if (m.float_mask.dtype() != dtype)
      throw_error<DTypeError>(op, "argument 'float_mask' ", m.float_mask.shape(), " is ",
                              dtype_name(m.float_mask.dtype()), " but '", input, "' is ", dtype_name(dtype));
    m.float_mask = check_attention_mask_shape(op, "float_mask", m.float_mask, full);
  }
  simplify_masks(m, d);
  return m;
}

double resolve_scale(const char* op, double scale, const Dims& d) {
  if (!std::isfinite(scale))
    throw_error<ValueError>(op, "argument 'scale' must be finite, got ", scale);
  if (scale != 0) return scale;
  return d.D > 0 ? 1.0 / std::sqrt(double(d.D)) : 1.0;
}

// One bool mask (true = masked) combining mask, key padding and causality, or undefined.
Tensor combined_bool_mask(const AttentionMasks& m, const Dims& d) {
  Tensor out;
  auto add = [&](const Tensor& x) { out = out.defined() ? logical_or(out, x) : x; };
  if (m.mask.defined()) add(m.mask);
  if (m.key_padding_mask.defined()) add(reshape(m.key_padding_mask, {d.B, 1, 1, d.S}));
  if (m.skip_padded_queries) add(reshape(m.key_padding_mask, {d.B, 1, d.T, 1}));  // padding queries see nothing
  if (m.is_causal) add(causal_mask(d.T, d.S));
  return out;
}

// Probabilities (B, H, T, S) from differentiable ops.
Tensor composite_probs(const Tensor& q, const Tensor& k, const AttentionMasks& m, const Dims& d, double scale) {
  Tensor scores = mul_scalar(matmul(split_heads(q, d.H), split_heads(k, d.H), false, true), scale);
  if (m.float_mask.defined()) scores = add(scores, m.float_mask);
  const Tensor mask = combined_bool_mask(m, d);
  return mask.defined() ? masked_softmax(scores, mask, -1) : softmax(scores, -1);
}

// The kernel's backward formulas in differentiable ops (used under create_graph):
//   dV = merge(P^T dO)   dS = softmax_backward(P, dO V^T)   dQ = scale merge(dS K)
//   dK = scale merge(dS^T Q)
std::array<Tensor, 3> composite_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                         const AttentionMasks& m, const Dims& d, double scale) {
  const Tensor p = composite_probs(q, k, m, d, scale);  // (B,H,T,S)
  const Tensor gh = split_heads(g, d.H);                 // (B,H,T,Dv)
  const Tensor dv = merge_heads(matmul(p, gh, true, false));
  const Tensor ds = mul_scalar(softmax_backward(p, matmul(gh, split_heads(v, d.H), false, true), -1), scale);
  const Tensor dq = merge_heads(matmul(ds, split_heads(k, d.H)));
  const Tensor dk = merge_heads(matmul(ds, split_heads(q, d.H), true, false));
  return {dq, dk, dv};
}

// Whether the forward keeps the probabilities for the backward (saving it one GEMM and one exp
// per score) instead of only the row statistics: when their KeptLayout takes at most
// kKeptProbabilitiesBytes and fits max_tensor_bytes(). Decided from shapes, masks and that
// limit only, and the backward's probabilities have the same bits either way, so the choice
// never changes a result; memory stays linear in T above the bound.
constexpr std::size_t kKeptProbabilitiesBytes = std::size_t(32) << 20;
bool keep_probabilities(const KeptLayout& kept, std::size_t itemsize) {
  const double bytes = double(kept.total) * double(itemsize);
  return bytes <= double(kKeptProbabilitiesBytes) && bytes <= double(max_tensor_bytes());
}
// Whether record_fused will record a node for these inputs (else nothing is kept).
bool recording(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) return true;
  return false;
}

// A right-padded batch packed without its padding (attention_packed_rows): batch b's L_b
// positions are rows [first[b], first[b] + L_b) of the (N, F) operands.
struct PackedRows {
  std::vector<std::size_t> lengths, first;  // (B) each
  std::size_t max_len = 0;
};

// The padded (B, max_len) batch of packed rows, which only the composed paths (a float mask
// that needs a gradient, create_graph) build: the rows' padded positions b * max_len + t
// (Int64, (N)), and the caller's checked masks plus key padding t >= L_b and
// skip_padded_queries.
Tensor padded_row_index(const PackedRows& r) {
  std::vector<std::int64_t> index;
  for (std::size_t b = 0; b < r.lengths.size(); ++b)
    for (std::size_t t = 0; t < r.lengths[b]; ++t) index.push_back(std::int64_t(b * r.max_len + t));
  const std::size_t n = index.size();
  return index_tensor(std::move(index), {n});
}
AttentionMasks padded_masks(const PackedRows& r, const AttentionMasks& masks) {
  std::vector<bool> padding(r.lengths.size() * r.max_len);
  for (std::size_t b = 0; b < r.lengths.size(); ++b)
    for (std::size_t t = r.lengths[b]; t < r.max_len; ++t) padding[b * r.max_len + t] = true;
  AttentionMasks padded = masks;
  padded.key_padding_mask = bool_tensor(padding, {r.lengths.size(), r.max_len});
  padded.skip_padded_queries = true;
  return padded;
}

// The fused op over q, k, v given as (data, row stride, first column) inside `inputs`
// (three tensors, or one packed qkv; with `rows`, a qkv of packed rows and masks without key
// padding: the lengths cut keys and queries). The node's inputs are these, then the defined
// masks (never differentiated here): the engine's saved-version check then refuses a backward
// after an in-place change to a mask, whose padding also sets the trimmed extents.
Tensor fused_attention(const char* op, std::vector<Tensor> inputs, const Dims& d, const AttentionMasks& masks,
                       double scale, std::shared_ptr<const PackedRows> rows = nullptr) {
  const bool packed = inputs.size() == 1;
  const std::size_t n_qkv = inputs.size();
  const std::size_t E = d.H * d.D, Ev = d.H * d.Dv;
  const std::size_t* first_row = rows ? rows->first.data() : nullptr;  // kept alive by `rows` in the closures
  // qkv columns: [0, E) q, [E, 2E) k, [2E, 2E + Ev) v
  auto views = [packed, E, Ev, d, first_row](auto* q, auto* k, auto* v) {
    using P = std::remove_pointer_t<decltype(q)>;
    if (packed) {
      const std::size_t ld = 2 * E + Ev;
      return std::array<HeadView<P>, 3>{heads_of(q, d.T, ld, d.D, 0, first_row), heads_of(q, d.T, ld, d.D, E, first_row),
                                        heads_of(q, d.T, ld, d.Dv, 2 * E, first_row)};
    }
    return std::array<HeadView<P>, 3>{heads_of(q, d.T, E, d.D), heads_of(k, d.S, E, d.D), heads_of(v, d.S, Ev, d.Dv)};
  };
  // read by both passes: 1 + each batch's last key that is not padding (packed rows: L_b)
  const std::vector<std::size_t> key_end = rows ? rows->lengths : key_ends(masks, d);
  Tensor stats;  // (B, H, T, 2): each query's softmax max and 1 / sum
  Tensor saved;  // the probabilities as `kept` lays them out, when small enough to keep (keep_probabilities)
  KeptLayout kept;
  Tensor out = dispatch_float(op, inputs[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* q = data_of<T>(inputs[0]);
    const T* k = packed ? q : data_of<T>(inputs[1]);
    const T* v = packed ? q : data_of<T>(inputs[2]);
    stats = empty_tensor<T>({d.B, d.H, d.T, 2}, op);
    Tensor o = rows ? empty_tensor<T>({inputs[0].shape()[0], Ev}, op) : empty_tensor<T>({d.B, d.T, Ev}, op);
    const MaskView<T> mv = mask_view<T>(masks, d, key_end, rows != nullptr);
    if (recording(inputs)) kept = kept_layout(d, mv);  // else nothing is kept: total 0
    const bool keep = kept.total > 0 && keep_probabilities(kept, sizeof(T));
    if (keep) saved = empty_tensor<T>({kept.total}, op);
    const auto in = views(q, k, v);
    forward_kernel<T>(d, T(scale), in[0], in[1], in[2], mv, fresh_data<T>(stats),
                      keep ? fresh_data<T>(saved) : nullptr, kept, heads_of(fresh_data<T>(o), d.T, Ev, d.Dv, 0, first_row));
    return o;
  });
  auto differentiable = [=](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor& x = n.input(0);
    std::vector<Tensor> grads(n.inputs().size());  // the masks' stay undefined
    if (rows) {  // on the padded batch: (N, F) rows to (B, T, F) and back
      const Tensor index = padded_row_index(*rows);
      const Tensor xp = unpack_rows(x, index, {d.B, d.T}), gp = unpack_rows(g, index, {d.B, d.T});
      const auto gr = composite_backward(narrow(xp, 2, 0, E), narrow(xp, 2, E, E), narrow(xp, 2, 2 * E, Ev), gp,
                                         padded_masks(*rows, masks), d, scale);
      grads[0] = pack_rows(concat({gr[0], gr[1], gr[2]}, 2), index);
      return grads;
    }
    if (packed) {
      const auto gr = composite_backward(narrow(x, 2, 0, E), narrow(x, 2, E, E), narrow(x, 2, 2 * E, Ev), g,
                                         masks, d, scale);
      grads[0] = concat({gr[0], gr[1], gr[2]}, 2);
      return grads;
    }
    const auto gr = composite_backward(x, n.input(1), n.input(2), g, masks, d, scale);
    for (std::size_t i = 0; i < 3; ++i)
      if (n.needs_grad(i)) grads[i] = gr[i];
    return grads;
  };
  auto first_order = [=, keep_alive = rows](const Node& n, const Tensor& g) -> std::vector<Tensor> {  // first_row
    (void)keep_alive;
    return dispatch_float(op, g.dtype(), [&](auto zero) -> std::vector<Tensor> {
      using T = decltype(zero);
      const T* q = data_of<T>(n.input(0));
      const T* k = packed ? q : data_of<T>(n.input(1));
      const T* v = packed ? q : data_of<T>(n.input(2));
      const auto in = views(q, k, v);
      const auto dO = heads_of(data_of<T>(g), d.T, Ev, d.Dv, 0, first_row);
      // Gradients of the inputs that need one (the packed qkv input: one gradient), made in
      // place; the others stay undefined.
      std::vector<Tensor> grads(n.inputs().size());  // the masks' stay undefined
      for (std::size_t i = 0; i < n_qkv; ++i)
        if (packed || n.needs_grad(i)) grads[i] = empty_tensor<T>(n.input(i).shape(), op);
      auto data = [&](std::size_t i) { return grads[i].defined() ? fresh_data<T>(grads[i]) : nullptr; };
      std::array<HeadView<T>, 3> out{};
      if (packed) {
        out = views(data(0), data(0), data(0));
      } else {
        const auto all = views(data(0), data(1), data(2));
        for (std::size_t i = 0; i < 3; ++i)
          if (n.needs_grad(i)) out[i] = all[i];
      }
      backward_kernel<T>(d, T(scale), in[0], in[1], in[2], data_of<T>(stats),
                         saved.defined() ? data_of<T>(saved) : nullptr, kept,
                         mask_view<T>(masks, d, key_end, rows != nullptr), dO, out[0], out[1], out[2]);
      return grads;
    });
  };
  for (const Tensor* m : {&masks.mask, &masks.key_padding_mask, &masks.float_mask})
    if (m->defined()) inputs.push_back(*m);
  return record_fused(op, out, std::move(inputs), first_order, differentiable);
}

bool mask_needs_grad(const AttentionMasks& m) {
  return m.float_mask.defined() && m.float_mask.requires_grad() && is_grad_enabled();
}

}  // namespace

Tensor check_attention_mask_shape(const char* op, const char* arg, const Tensor& mask, const Shape& scores,
                                  bool unbatched) {
  const std::size_t B = scores.at(0), H = scores.at(1), T = scores.at(2), S = scores.at(3);
  const Shape& s = mask.shape();
  if (s.size() == 2 && s == Shape{T, S}) return mask;
  if (s.size() == 3 && s == Shape{B * H, T, S}) return reshape(mask, scores);
  if (s.size() == 4) {
    bool fits = true;
    for (std::size_t i = 0; i < 4; ++i) fits = fits && (s[i] == scores[i] || s[i] == 1);
    if (fits) return mask;
  }
  if (unbatched)
    throw_error<ShapeError>(op, "argument '", arg, "' ", s, " must be (T, S) = ", Shape{T, S}, " or (H, T, S) = ",
                            Shape{H, T, S}, " for unbatched input");
  throw_error<ShapeError>(op, "argument '", arg, "' ", s, " must be (T, S) = ", Shape{T, S}, ", (B*H, T, S) = ",
                          Shape{B * H, T, S}, " or 4-D broadcastable to (B, H, T, S) = ", scores,
                          " (a 3-D mask is PyTorch's (B*H, T, S), entry b*H + h; (B, T, S) is not"
                          " accepted: pass (B, 1, T, S))");
}

AttentionMasks attention_masks(const char* op, const Tensor& attn_mask, const Tensor& key_padding_mask,
                               bool is_causal, const Shape& scores, DType dtype, bool unbatched) {
  const std::size_t B = scores.at(0), S = scores.at(3);
  auto check_dtype = [&](const char* arg, const Tensor& m, const char* meaning) {
    if (m.dtype() != DType::Bool && !is_float(m.dtype()))
      throw_error<DTypeError>(op, "argument '", arg, "' ", m.shape(), " must be bool (", meaning,
                              ") or float (added to the scores), got ", dtype_name(m.dtype()));
    if (is_float(m.dtype()) && m.dtype() != dtype)
      throw_error<DTypeError>(op, "float argument '", arg, "' ", m.shape(), " is ", dtype_name(m.dtype()),
                              " but the inputs are ", dtype_name(dtype));
  };
  AttentionMasks out;
  out.is_causal = is_causal;
  if (attn_mask.defined()) {
    check_dtype("attn_mask", attn_mask, "true = masked");
    const Tensor m = check_attention_mask_shape(op, "attn_mask", attn_mask, scores, unbatched);
    (m.dtype() == DType::Bool ? out.mask : out.float_mask) = m;
  }
  if (key_padding_mask.defined()) {
    const Tensor& m = key_padding_mask;
    check_dtype("key_padding_mask", m, "true = padding");
    if (unbatched && m.shape() != Shape{S})
      throw_error<ShapeError>(op, "argument 'key_padding_mask' ", m.shape(), " must be (S) = ", Shape{S},
                              " for unbatched input");
    if (!unbatched) check_shape(op, "key_padding_mask", m, {B, S}, "(B, S)");
    if (m.dtype() == DType::Bool) {
      out.key_padding_mask = reshape(m, {B, S});
    } else {
      const Tensor add_kpm = reshape(m, {B, 1, 1, S});
      out.float_mask = out.float_mask.defined() ? add(out.float_mask, add_kpm) : add_kpm;
    }
  }
  return out;
}

AttentionResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t num_heads,
                                    const AttentionMasks& masks_in, double scale,
                                    const std::function<Tensor(const Tensor&)>& transform_weights) {
  const char* op = "attention";
  const Dims d = check_qkv(op, q, k, v, num_heads);
  const AttentionMasks masks = check_masks(op, masks_in, d, q.dtype(), "q");
  Tensor p = composite_probs(q, k, masks, d, resolve_scale(op, scale, d));
  if (transform_weights) p = transform_weights(p);
  return {merge_heads(matmul(p, split_heads(v, d.H))), p};
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t num_heads,
                 const AttentionMasks& masks_in, double scale) {
  const char* op = "attention";
  const Dims d = check_qkv(op, q, k, v, num_heads);
  const AttentionMasks masks = check_masks(op, masks_in, d, q.dtype(), "q");
  scale = resolve_scale(op, scale, d);
  if (mask_needs_grad(masks)) return attention_reference(q, k, v, num_heads, masks, scale).out;
  return fused_attention(op, {q, k, v}, d, masks, scale);
}

Tensor attention_packed(const Tensor& qkv, std::size_t num_heads, const AttentionMasks& masks_in, double scale) {
  const char* op = "attention_packed";
  check_float(op, "qkv", qkv);
  if (qkv.dim() != 3 || num_heads == 0 || qkv.shape()[2] % (3 * num_heads) != 0)
    throw_error<ShapeError>(op, "argument 'qkv' ", qkv.shape(), " must be (B, T, 3 * E) with E divisible by num_heads ",
                            num_heads);
  const std::size_t E = qkv.shape()[2] / 3;
  Dims d;
  d.B = qkv.shape()[0], d.T = d.S = qkv.shape()[1], d.H = num_heads, d.D = d.Dv = E / num_heads;
  const AttentionMasks masks = check_masks(op, masks_in, d, qkv.dtype(), "qkv");
  scale = resolve_scale(op, scale, d);
  if (mask_needs_grad(masks))
    return attention_reference(narrow(qkv, 2, 0, E), narrow(qkv, 2, E, E), narrow(qkv, 2, 2 * E, E), num_heads,
                               masks, scale)
        .out;
  return fused_attention(op, {qkv}, d, masks, scale);
}

Tensor attention_packed_rows(const Tensor& qkv, const std::vector<std::size_t>& lengths, std::size_t max_len,
                             std::size_t num_heads, const AttentionMasks& masks_in, double scale) {
  const char* op = "attention_packed_rows";
  check_float(op, "qkv", qkv);
  if (qkv.dim() != 2 || num_heads == 0 || qkv.shape()[1] % (3 * num_heads) != 0)
    throw_error<ShapeError>(op, "argument 'qkv' ", qkv.shape(), " must be (N, 3 * E) with E divisible by num_heads ",
                            num_heads);
  if (masks_in.key_padding_mask.defined() || masks_in.skip_padded_queries)
    throw_error<ValueError>(op, "the lengths mask the padding: masks.key_padding_mask must be undefined and "
                            "masks.skip_padded_queries false, got ",
                            masks_in.key_padding_mask.defined() ? "a key_padding_mask " + shape_str(masks_in.key_padding_mask.shape())
                                                                : std::string("skip_padded_queries"));
  const std::size_t B = lengths.size(), E = qkv.shape()[1] / 3;
  auto rows = std::make_shared<PackedRows>();
  rows->lengths = lengths;
  rows->first.resize(B);
  rows->max_len = max_len;
  std::size_t n = 0;
  for (std::size_t b = 0; b < B; ++b) {
    if (lengths[b] > max_len)
      throw_error<ValueError>(op, "argument 'lengths' [", b, "] = ", lengths[b], " exceeds max_len ", max_len);
    rows->first[b] = n;
    n += lengths[b];
  }
  if (n != qkv.shape()[0])
    throw_error<ShapeError>(op, "argument 'qkv' ", qkv.shape(), " must have one row per position: the ", B,
                            " 'lengths' sum to ", n);
  Dims d;
  d.B = B, d.T = d.S = max_len, d.H = num_heads, d.D = d.Dv = E / num_heads;
  // checked and simplified; the lengths replace key padding and skipped queries
  const AttentionMasks masks = check_masks(op, masks_in, d, qkv.dtype(), "qkv");
  scale = resolve_scale(op, scale, d);
  if (mask_needs_grad(masks)) {  // on the padded batch
    const Tensor index = padded_row_index(*rows), x = unpack_rows(qkv, index, {B, max_len});
    return pack_rows(attention_reference(narrow(x, 2, 0, E), narrow(x, 2, E, E), narrow(x, 2, 2 * E, E), num_heads,
                                         padded_masks(*rows, masks), scale)
                         .out,
                     index);
  }
  return fused_attention(op, {qkv}, d, masks, scale, std::move(rows));
}

// --- registration ----------------------------------------------------------------------
namespace {
// Lengths 3, 0, 1 of max_len 4 (batch 1 all padding): 4 rows of qkv (H 2, D 2).
Tensor packed_rows_sample(Rng& r) { return sample_randn({4, 12}, r); }
// B 2, T 3, S 4, H 2, D 2, Dv 3.
std::vector<Tensor> qkv_sample(Rng& r) {
  return {sample_randn({2, 3, 4}, r), sample_randn({2, 4, 4}, r), sample_randn({2, 4, 6}, r)};
}
// Row 1 of every head of batch 0 fully masked; batch 1's last key is padding.
AttentionMasks sample_masks(bool causal) {
  AttentionMasks m;
  m.mask = bool_tensor({false, false, true, false, true, true, true, true, false, false, false, false}, {3, 4});
  m.key_padding_mask = bool_tensor({false, false, false, false, false, false, false, true}, {2, 4});
  m.is_causal = causal;
  return m;
}
}  // namespace

XGRAD_REGISTER_OP({"attention", [](const auto& x) { return attention(x[0], x[1], x[2], 2); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"B2 T3 S4 H2 D2 Dv3", qkv_sample(r)},
                             {"T1 S1 D2 Dv1", {sample_randn({1, 1, 4}, r), sample_randn({1, 1, 4}, r), sample_randn({1, 1, 2}, r)}}};
                   }});
XGRAD_REGISTER_OP({"attention(masks)",
                   [](const auto& x) { return attention(x[0], x[1], x[2], 2, sample_masks(false)); },
                   [](Rng& r) -> std::vector<OpSample> { return {{"mask (3,4) + key padding", qkv_sample(r)}}; }});
XGRAD_REGISTER_OP({"attention(causal, masks)",
                   [](const auto& x) { return attention(x[0], x[1], x[2], 2, sample_masks(true)); },
                   [](Rng& r) -> std::vector<OpSample> { return {{"causal + mask + key padding", qkv_sample(r)}}; }});
XGRAD_REGISTER_OP({"attention(float mask)",
                   [](const auto& x) {
                     AttentionMasks m;
                     m.float_mask = x[3];
                     return attention(x[0], x[1], x[2], 2, m, 0.7);
                   },
                   [](Rng& r) -> std::vector<OpSample> {
                     auto s = qkv_sample(r);
                     auto c = qkv_sample(r);
                     const double ninf = -std::numeric_limits<double>::infinity();
                     s.push_back(sample_randn({2, 1, 3, 4}, r));  // differentiable: composite path
                     c.push_back(tensor({0.5, ninf, -1, 0, 0, 0.25, ninf, 2, 1, -0.5, 0, 0}, {3, 4}, DType::Float64));
                     return {{"float mask (2,1,3,4) requiring grad", s}, {"constant (3,4) with -inf", c}};
                   }});
XGRAD_REGISTER_OP({"attention(causal, 2 row blocks)",
                   [](const auto& x) {
                     AttentionMasks m;
                     m.is_causal = true;
                     return attention(x[0], x[1], x[2], 1, m);
                   },
                   [](Rng& r) -> std::vector<OpSample> {  // one head of width 1: cheap float64 checks
                     return {{"B1 T66 S66 H1 D1", {sample_randn({1, 66, 1}, r), sample_randn({1, 66, 1}, r),
                                                   sample_randn({1, 66, 1}, r)}}};
                   }});
XGRAD_REGISTER_OP({"attention_packed", [](const auto& x) { return attention_packed(x[0], 2); },
                   [](Rng& r) -> std::vector<OpSample> { return {{"qkv (2,4,12)", {sample_randn({2, 4, 12}, r)}}}; }});
XGRAD_REGISTER_OP({"attention_packed_rows",
                   [](const auto& x) {
                     AttentionMasks m;
                     m.mask = bool_tensor({false, false, true, false}, {1, 1, 1, 4});  // key 2 masked for everyone
                     return attention_packed_rows(x[0], {3, 0, 1}, 4, 2, m);
                   },
                   [](Rng& r) -> std::vector<OpSample> { return {{"lengths 3 0 1 of 4, mask", {packed_rows_sample(r)}}}; }});
XGRAD_REGISTER_OP({"attention_packed_rows(causal, float mask)",
                   [](const auto& x) {
                     AttentionMasks m;
                     m.is_causal = true;
                     m.float_mask = x[1];
                     return attention_packed_rows(x[0], {3, 0, 1}, 4, 2, m, 0.6);
                   },
                   [](Rng& r) -> std::vector<OpSample> {
                     const double ninf = -std::numeric_limits<double>::infinity();
                     return {{"causal, constant (4,4) float mask",
                              {packed_rows_sample(r),
                               tensor({0.5, 0, 0, 0, ninf, -1, 0, 0, 0.25, 2, 0, 0, 1, -0.5, ninf, 0}, {4, 4}, DType::Float64)}}};
                   }});
XGRAD_REGISTER_OP({"attention_packed(causal, masks)",
                   [](const auto& x) {
                     AttentionMasks m = sample_masks(true);
                     m.mask = bool_tensor({false, false, false, true}, {1, 1, 1, 4});  // key 3 masked for everyone
                     return attention_packed(x[0], 2, m);
                   },
                   [](Rng& r) -> std::vector<OpSample> { return {{"qkv (2,4,12) causal", {sample_randn({2, 4, 12}, r)}}}; }});

}  // namespace xgrad
