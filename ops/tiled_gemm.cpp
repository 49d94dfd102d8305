// xgrad's own float32 GEMM micro-kernels (declared in ops/detail.hpp): the small GEMMs
// without BLAS's per-call cost, attention's per-head products, whose transposed operand is
// packed once per head instead of once per BLAS call, and gemm<float>'s mid-sized products
// with op(A) not transposed (tiled_gemm_fits; a transposed B packed once per call), or all of
// them where OpenBLAS runs 256-bit kernels on a CPU where xgrad runs its AVX-512 path.
//
// Small GEMMs: a 16x16x16 product is 4,096 multiply-adds, 256 AVX-512 or 512 AVX2 FMAs.
// OpenBLAS spends ~3,000 instructions per call around them (argument checks, buffer set-up,
// packing both operands into its panels), and the reverse model's training step makes 3,072
// such calls (its attention heads: T = S = D = 16). With every dimension <= kSmallGemmMax the
// product runs here (small_gemm) instead; one of at most 16 x 16 (any K) without run_tiles'
// blocking (tiny_gemm): on the AVX-512 path in one pass over k, a register per row
// (tiny_gemm_avx512), on the AVX2 one in row groups of 6 (tiny_gemm_avx2).
// Attention heads (ops/attention.cpp): 64 query rows against up to S keys with K = D (scores),
// or against D columns with K = S (P V): OpenBLAS re-packs both operands on every call, ran
// these at 57-88 GFLOP/s on an AVX-512 Xeon against 176 for one large product, and packing was
// 20% of the large MHA layer's time. tiled_gemm reads op(B) as rows; a transposed B is packed
// into that layout once per head by the caller (transpose), or into column panels of
// bpanel_width() columns (pack_bpanels, read by tiled_gemm_bpanels: attention's K^T and V^T, whose
// rows lie a whole row of keys apart, and gemm<float>'s B when not transposed, for products of
// 256 rows or more).
//
//   C (M, N) = alpha op(A) Bk + beta C       op(A) (M, K), Bk (K, N) = op(B) as rows (ldb)
//   for each tile of R rows i and W columns j (micro-kernel tile_*; W a multiple of the
//   vector width; column tails read and write through masks, never past column N):
//     acc_ij = sum_{k = 0 .. K-1} a_ik b_kj        in order of k, one multiply-add per k
//     C_ij   = alpha acc_ij (+ beta C_ij if beta != 0; C is never read for beta 0)
//     C_ij   = alpha acc_ij + bias_j            with a row bias (beta 0; linear's bias, fused
//              here instead of copied into C first: the same roundings as that copy and beta 1)
//   the micro-kernel writes C itself: its rows and columns inside C only, products alpha acc
//   and beta C each rounded, then their sum; rows in panels, each panel's k in chunks (128 on
//   the AVX-512 and baseline paths, 2,048 on the AVX2 one; run_tiles' Blocking), the raw acc
//   carried from one chunk to the next through a scratch
//
// Every element of C is the same function of its row of op(A) and its column of op(B),
// whatever M, N, the tile size, the tile it falls in, the chunks or the thread count. The AVX-512 and
// AVX2 micro-kernels fuse each multiply-add (one rounding, the same bits on both paths and
// for every tile size); the baseline one rounds the product and then the sum.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "xgrad/ops/avx512.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/isa.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define XGRAD_TILED_GEMM_X86 1
#endif

namespace xgrad::detail {
namespace {

// One tile's work. The tile of C: row r at c[r], rows r < rows <= R, columns l < cols <= W:
//   acc_rl = sum_k a[r][k' * ka] b[k' * ldb + l]   in order of k; k' = k, or ks[k] with a k map;
//                                                  b: cols readable columns a row
//   c_rl   = alpha acc_rl                          beta == 0: C is not read
//   c_rl   = alpha acc_rl + beta c_rl              beta != 0: both products rounded, then the sum
//   c_rl   = alpha acc_rl + bias[l]                bias given (beta 0): the product rounded, then the sum
// A product with a long K runs in chunks of k (run_tiles): then acc starts from the R x W
// floats at partial (row stride ldp) unless first, and unless last ends there, raw, instead of
// in C. A float32 sum carried on from its stored value is the same chain of roundings, so the
// chunks do not change a bit.
// A k map comes as the element offsets of each k', koff[2 k] = k' ka and koff[2 k + 1] = k' ldb,
// computed once per product (run_tiles): two 64-bit multiplies a k in the loop take issue slots
// of the FMA ports on Intel cores (the reverse model's dense step ran 2.1% (AVX-512) and 2.7%
// (AVX2 path) slower with them, process-alternating runs on a Xeon).
struct TileArgs {
  const float* const* a;
  std::size_t ka;
  const float* b;
  std::size_t ldb, K;
  const std::size_t* koff;
  float alpha, beta;
  float* const* c;
  std::size_t rows, cols;
  float* partial;
  std::size_t ldp;
  bool first, last;
  const float* bias;  // the tile's first column's bias, or nullptr
};
// The row tiles of one column block and k chunk, R rows each from row `first` while < `end`,
// run by one call of a micro-kernel's loop (tiles_*): the loop builds each tile's TileArgs in
// place of a call per tile (the reverse model's linear products: ~1,000 tiles of K = 64 each).
//   a_ik = A[row(min(i, M - 1)) * ra + k * ka]   (A at the chunk's first k; rows past M - 1 repeat M - 1)
//   row i of C at c + row(i) * ldc; row(i) = i, or rows[i] with a row map (gemm<float>'s products
//   without A's rows of exact zeros: the other rows read and written in place, not gathered);
//   k as in TileArgs (a k map: A and b at k' = 0, koff at the chunk's first k)
//   tile i0: its raw sums at partial + (i0 - p0) * ldp (partial: the panel's row p0, or null),
//   min(R, M - i0) rows, cols columns
struct TileRun {
  const float* A;
  std::size_t ra, ka, M, first, end;
  const std::size_t* rows;
  const float* b;
  std::size_t ldb, K;
  const std::size_t* koff;
  float alpha, beta;
  float* c;
  std::size_t ldc, cols;
  float* partial;
  std::size_t ldp, p0;
  bool first_chunk, last_chunk;
  const float* bias;
};
// Row i of the product (i < M) in A and C: i, or rows[i] with a row map.
inline std::size_t row_of(const TileRun& run, std::size_t i) { return run.rows ? run.rows[i] : i; }
template <std::size_t R>
inline TileArgs tile_of(const TileRun& run, std::size_t i0, const float** a, float** c) {
  for (std::size_t r = 0; r < R; ++r) {
    const std::size_t i = std::min(i0 + r, run.M - 1), row = row_of(run, i);
    a[r] = run.A + row * run.ra, c[r] = run.c + row * run.ldc;
  }
  float* const partial = run.partial ? run.partial + (i0 - run.p0) * run.ldp : nullptr;
  return TileArgs{a, run.ka, run.b, run.ldb, run.K, run.koff, run.alpha, run.beta, c, std::min(R, run.M - i0), run.cols,
                  partial, run.ldp, run.first_chunk, run.last_chunk, run.bias};
}
using Tiles = void (*)(const TileRun& run);
struct Tiling {
  Tiles tiles;
  std::size_t rows, cols;  // R, W
  // For a panel's last tile when it has at most tail_rows rows: a tile of tail_rows x W, so that
  // fewer repeated rows are computed (M = 64 in 6-row tiles: 10 + one 4-row tile, not 66 rows).
  Tiles tail = nullptr;
  std::size_t tail_rows = 0;
};
// How run_tiles walks a product (the bits do not depend on it): k in chunks of at most `chunk`,
// rows in panels of about panel_floats / (the chunk's k) rows, at least kMinPanelRows and at
// most kPanelRows (see run_tiles).
struct Blocking {
  std::size_t chunk, panel_floats;
};

template <std::size_t R, std::size_t W>
inline void tile_baseline(const TileArgs& t) {
  float acc[R][W] = {};
  if (!t.first)
    for (std::size_t r = 0; r < R; ++r) std::copy_n(t.partial + r * t.ldp, W, acc[r]);
  for (std::size_t k = 0; k < t.K; ++k) {
    const float* b = t.b + (t.koff ? t.koff[2 * k + 1] : k * t.ldb);
    const std::size_t at = t.koff ? t.koff[2 * k] : k * t.ka;
    for (std::size_t r = 0; r < R; ++r) {
      const float x = t.a[r][at];
      for (std::size_t l = 0; l < t.cols; ++l) acc[r][l] += x * b[l];
    }
  }
  if (!t.last) {
    for (std::size_t r = 0; r < R; ++r) std::copy_n(acc[r], W, t.partial + r * t.ldp);
    return;
  }
  for (std::size_t r = 0; r < t.rows; ++r) {
    float* const c = t.c[r];
    if (t.bias)
      for (std::size_t l = 0; l < t.cols; ++l) c[l] = t.alpha * acc[r][l] + t.bias[l];
    else if (t.beta == 0.0f)
      for (std::size_t l = 0; l < t.cols; ++l) c[l] = t.alpha * acc[r][l];
    else
      for (std::size_t l = 0; l < t.cols; ++l) c[l] = t.alpha * acc[r][l] + t.beta * c[l];
  }
}

template <std::size_t R, std::size_t W>
void tiles_baseline(const TileRun& run) {
  for (std::size_t i0 = run.first; i0 < run.end; i0 += R) {
    const float* a[R];
    float* c[R];
    tile_baseline<R, W>(tile_of<R>(run, i0, a, c));
  }
}

#ifdef XGRAD_TILED_GEMM_X86
// Keeps the vector x a rounded product: the compiler may not fuse it into the add that
// follows (the baseline kernel, built without FMA, rounds it too).
#define XGRAD_ROUNDED(x) __asm__("" : "+v"(x))
#define XGRAD_UNROLL _Pragma("GCC unroll 16")

// The lanes m of one row's sums acc into C at c: alpha acc, + bias (beta 0) or + beta C, each
// product rounded, then the sum; C is not read for beta 0.
XGRAD_TARGET_AVX512 inline __attribute__((always_inline)) void store_c_avx512(__m512 acc, __mmask16 m, __m512 va,
                                                                             float beta, __m512 vb, const __m512* bias,
                                                                             float* c) {
  __m512 y = _mm512_mul_ps(va, acc);
  if (bias) {
    XGRAD_ROUNDED(y);
    y = _mm512_add_ps(y, *bias);
  } else if (beta != 0.0f) {
    __m512 z = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, c));
    XGRAD_ROUNDED(y);
    XGRAD_ROUNDED(z);
    y = _mm512_add_ps(y, z);
  }
  _mm512_mask_storeu_ps(c, m, y);
}

// R rows x V vectors of 16 columns. Masked: some of the V vectors are partly past column cols.
// KMap: k through t.koff. Adjacent: row r's a_rk is t.a[0][r + k ka] (op(A) = A^T, the tile's
// rows consecutive): one base register for the R rows instead of R, which with eight rows left
// GCC spilling bases and the k counter to the stack (trans_a heads ran ~12% below the others).
template <std::size_t R, std::size_t V, bool Masked, bool KMap, bool Adjacent = false>
XGRAD_TARGET_AVX512 inline __attribute__((always_inline)) void tile_avx512_body(const TileArgs& t) {
  __mmask16 m[V];
  XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) {
    const std::size_t n = t.cols > 16 * v ? std::min<std::size_t>(16, t.cols - 16 * v) : 0;
    m[v] = __mmask16((1u << n) - 1);  // lanes l < n
  }
  __m512 acc[R][V];
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) acc[r][v] =
      t.first ? _mm512_setzero_ps() : _mm512_loadu_ps(t.partial + r * t.ldp + 16 * v);
  const float* ar[R];
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) ar[r] = t.a[r];
  const float* b = t.b;
  const std::size_t K = t.K, ka = t.ka, ldb = t.ldb;  // in registers: not re-read from t every k
  const std::size_t* const koff = t.koff;
  for (std::size_t k = 0, at = 0; k < K; ++k, at += ka, b += ldb) {
    if constexpr (KMap) at = koff[2 * k], b = t.b + koff[2 * k + 1];
    __m512 bk[V];
    XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) bk[v] =
        Masked ? _mm512_maskz_loadu_ps(m[v], b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(Adjacent ? ar[0][at + r] : ar[r][at]);
      XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, bk[v], acc[r][v]);
    }
  }
  if (!t.last) {
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v)
        _mm512_storeu_ps(t.partial + r * t.ldp + 16 * v, acc[r][v]);
    return;
  }
  const __m512 va = _mm512_set1_ps(t.alpha), vb = _mm512_set1_ps(t.beta);
  __m512 bias[V];
  if (t.bias)
    XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) bias[v] = _mm512_maskz_loadu_ps(m[v], t.bias + 16 * v);
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    if (r >= t.rows) break;
    float* const cr = t.c[r];
    XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v)
      store_c_avx512(acc[r][v], m[v], va, t.beta, vb, t.bias ? &bias[v] : nullptr, cr + 16 * v);
  }
}
template <std::size_t R, std::size_t V, bool Masked, bool KMap>
XGRAD_TARGET_AVX512 inline __attribute__((always_inline)) void tile_loop_avx512(const TileRun& run) {
  const float* a[R];
  float* c[R];
  for (std::size_t i0 = run.first; i0 < run.end; i0 += R) {
    const TileArgs t = tile_of<R>(run, i0, a, c);
    if (run.ra == 1 && !run.rows && i0 + R <= run.M) tile_avx512_body<R, V, Masked, KMap, true>(t);
    else tile_avx512_body<R, V, Masked, KMap>(t);
  }
}
template <std::size_t R, std::size_t V>
XGRAD_TARGET_AVX512 void tiles_avx512(const TileRun& run) {
  const bool whole = run.cols == 16 * V;
  if (run.koff) whole ? tile_loop_avx512<R, V, false, true>(run) : tile_loop_avx512<R, V, true, true>(run);
  else whole ? tile_loop_avx512<R, V, false, false>(run) : tile_loop_avx512<R, V, true, false>(run);
}

// A whole product of M <= R rows and N <= 16 columns in one pass over k, one register a row
// (run_tiles starts with it, via tiny_gemm: attention heads of <= 16 keys and features, six
// 16 x 16 x 16 products a head in the reverse model), without the blocking and per-tile set-up. Each element is
// the tiles' function: the fused multiply-adds in order of k from 0, then store_c_avx512.
template <std::size_t R>
XGRAD_TARGET_AVX512 void tiny_gemm_avx512(bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha,
                                          const float* A, std::size_t lda, const float* Bk, std::size_t ldb, float beta,
                                          float* C, std::size_t ldc, const float* bias) {
  const __mmask16 m = __mmask16((1u << N) - 1);  // lanes l < N
  const std::size_t ra = trans_a ? 1 : lda, ka = trans_a ? lda : 1;  // a_ik = A[i * ra + k * ka]
  const float* ar[R];
  const float* row = A;  // rows past M - 1 repeat it (a running pointer: min(r, M - 1) ra was vectorized into
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {  // 64-bit multiplies, ~7% of a 16 x 16 x 16 product)
    ar[r] = row;
    if (r + 1 < M) row += ra;
  }
  __m512 acc[R];
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const float* b = Bk;
  for (std::size_t k = 0, at = 0; k < K; ++k, at += ka, b += ldb) {
    const __m512 bk = _mm512_maskz_loadu_ps(m, b);
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(ar[r][at]), bk, acc[r]);
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __m512 vbias = bias ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    if (r >= M) break;
    store_c_avx512(acc[r], m, va, beta, vb, bias ? &vbias : nullptr, C + r * ldc);
  }
}

// 32-bit lane l of the 8 lanes at kLaneMask + 8 - n is all ones for l < n, zero after (0 <= n <= 8).
constexpr std::int32_t kLaneMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1};

// R rows x V vectors of 8 columns. Masked: some of the V vectors are partly past column cols.
// KMap: k through t.koff.
template <std::size_t R, std::size_t V, bool Masked, bool KMap>
XGRAD_TARGET_AVX2 inline __attribute__((always_inline)) void tile_avx2_body(const TileArgs& t) {
  __m256i m[V];
  std::size_t n[V];  // columns of each vector in the tile
  XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) {
    n[v] = t.cols > 8 * v ? std::min<std::size_t>(8, t.cols - 8 * v) : 0;
    m[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMask + 8 - n[v]));
  }
  __m256 acc[R][V];
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) acc[r][v] =
      t.first ? _mm256_setzero_ps() : _mm256_loadu_ps(t.partial + r * t.ldp + 8 * v);
  const float* ar[R];
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) ar[r] = t.a[r];
  const float* b = t.b;
  const std::size_t K = t.K, ka = t.ka, ldb = t.ldb;  // in registers: not re-read from t every k
  const std::size_t* const koff = t.koff;
  for (std::size_t k = 0, at = 0; k < K; ++k, at += ka, b += ldb) {
    if constexpr (KMap) at = koff[2 * k], b = t.b + koff[2 * k + 1];
    __m256 bk[V];
    XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) bk[v] =
        Masked ? _mm256_maskload_ps(b + 8 * v, m[v]) : _mm256_loadu_ps(b + 8 * v);
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(ar[r] + at);
      XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(x, bk[v], acc[r][v]);
    }
  }
  if (!t.last) {
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v)
        _mm256_storeu_ps(t.partial + r * t.ldp + 8 * v, acc[r][v]);
    return;
  }
  const __m256 va = _mm256_set1_ps(t.alpha), vb = _mm256_set1_ps(t.beta);
  __m256 bias[V];
  if (t.bias)
    XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) bias[v] = _mm256_maskload_ps(t.bias + 8 * v, m[v]);
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    if (r >= t.rows) break;
    float* const cr = t.c[r];
    XGRAD_UNROLL for (std::size_t v = 0; v < V; ++v) {
      __m256 y = _mm256_mul_ps(va, acc[r][v]);
      if (t.bias) {
        XGRAD_ROUNDED(y);
        y = _mm256_add_ps(y, bias[v]);
      } else if (t.beta != 0.0f) {
        __m256 z = _mm256_mul_ps(vb, Masked ? _mm256_maskload_ps(cr + 8 * v, m[v]) : _mm256_loadu_ps(cr + 8 * v));
        XGRAD_ROUNDED(y);
        XGRAD_ROUNDED(z);
        y = _mm256_add_ps(y, z);
      }
      if (Masked) store_first(cr + 8 * v, y, n[v]);  // not _mm256_maskstore_ps: microcoded on AMD Zen
      else _mm256_storeu_ps(cr + 8 * v, y);
    }
  }
}
// The rows of C the tile after tile i0 stores (its first cache line each), asked for before
// tile i0 runs: a product's output is fresh memory, and each column block's tiles store to new
// lines of C, R rows apart (ldc floats), a stride the hardware prefetchers did not cover in
// time. Only the k chunk that stores C (a raw-sum chunk stores to the scratch, in cache).
// Paired on a Zen 3 (in-process alternation, medians of the per-round ratios): the reverse
// model's dense step 0.6-5.1% faster in seven sets (the more, the slower the machine ran), with
// the padding skipped 0.5-1.9% faster in five sets of six, 1.4% slower in one; MHA large
// 1.5-6.0% faster in four sets at one thread, even in one, 3.7% faster at two. Two tiles
// ahead measured the same as one; the next tile's rows of A as well: 3-7% slower.
template <std::size_t R>
inline void prefetch_next_tile_c(const TileRun& run, std::size_t i0) {
  if (!run.last_chunk) return;
  for (std::size_t i = i0 + R; i < std::min(i0 + 2 * R, run.end); ++i)
    __builtin_prefetch(run.c + row_of(run, i) * run.ldc, 1, 3);
}
template <std::size_t R, std::size_t V, bool Masked, bool KMap>
XGRAD_TARGET_AVX2 inline __attribute__((always_inline)) void tile_loop_avx2(const TileRun& run) {
  const float* a[R];
  float* c[R];
  for (std::size_t i0 = run.first; i0 < run.end; i0 += R) {
    prefetch_next_tile_c<R>(run, i0);
    tile_avx2_body<R, V, Masked, KMap>(tile_of<R>(run, i0, a, c));
  }
}
template <std::size_t R, std::size_t V>
XGRAD_TARGET_AVX2 void tiles_avx2(const TileRun& run) {
  const bool whole = run.cols == 8 * V;
  if (run.koff) whole ? tile_loop_avx2<R, V, false, true>(run) : tile_loop_avx2<R, V, true, true>(run);
  else whole ? tile_loop_avx2<R, V, false, false>(run) : tile_loop_avx2<R, V, true, false>(run);
}
// The AVX2 path's tiny_gemm: rows in groups of 6 (12 of the 16 ymm registers accumulate), the
// last group of 4 when at most 4 rows are left, each group one pass over k through
// tile_avx2_body, without run_tiles' blocking and per-tile set-up (the reverse model's 16 x 16 x 16
// head products: 3 tiles of 12 or 8 chains instead of 4 of 8; 144 -> 116 ns a product and the
// dense step ~2% faster, paired on the Xeon's AVX2 path). Rows past M - 1 repeat it.
template <std::size_t R>
XGRAD_TARGET_AVX2 inline __attribute__((always_inline)) void tiny_rows_avx2(std::size_t i0, std::size_t M, std::size_t N,
                                                                            const TileArgs& proto, const float* A,
                                                                            std::size_t ra, float* C, std::size_t ldc) {
  const float* a[R];
  float* c[R];
  const float* row = A + i0 * ra;
  float* crow = C + i0 * ldc;
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    a[r] = row, c[r] = crow;
    if (i0 + r + 1 < M) row += ra, crow += ldc;
  }
  TileArgs t = proto;
  t.a = a, t.c = c, t.rows = std::min(R, M - i0);
  N == 16 ? tile_avx2_body<R, 2, false, false>(t) : tile_avx2_body<R, 2, true, false>(t);
}
XGRAD_TARGET_AVX2 void tiny_gemm_avx2(bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha,
                                      const float* A, std::size_t lda, const float* Bk, std::size_t ldb, float beta,
                                      float* C, std::size_t ldc, const float* bias) {
  const std::size_t ra = trans_a ? 1 : lda, ka = trans_a ? lda : 1;  // a_ik = A[i * ra + k * ka]
  const TileArgs proto{nullptr, ka, Bk, ldb, K, nullptr, alpha, beta, nullptr, 0, N, nullptr, 0, true, true, bias};
  for (std::size_t i0 = 0; i0 < M;)
    if (M - i0 > 4) tiny_rows_avx2<6>(i0, M, N, proto, A, ra, C, ldc), i0 += 6;
    else tiny_rows_avx2<4>(i0, M, N, proto, A, ra, C, ldc), i0 += 4;
}
#undef XGRAD_UNROLL
#undef XGRAD_ROUNDED
#endif

// Rows in panels, each panel's k chunks in turn: a panel's chunk of op(A) stays in L2 while every
// column block reads it, and a column block's chunk of op(B) (k x W floats) in L1 or L2 while
// every row tile of the panel reads it.
// AVX-512 (and baseline): k chunks of 128 (a column block's chunk, 128 x 32 floats, 16 KiB in
// L1), panels of 256 rows (256 x 128 floats, 128 KiB; M 2048, N 1536, K 512 on one Zen 5 core:
// 149 GFLOP/s as one panel, 175 in panels of 256 rows).
// AVX2: k in one pass up to 2,048 and panels of 32 Ki floats (K 512: 64 rows, 128 KiB: half the
// 256 KiB L2 of Intel's client AVX2 CPUs; 64 Ki floats ran at the same speed on a Zen 3's
// 512 KiB). A
// chunked product carries each tile's raw sums through a scratch of panel x N floats, which for
// the MHA projections' N = 512-1,536 is 0.5-1.5 MiB, out of L2: on a Zen 3 the projections' shapes
// ran at 79-82 GFLOP/s in chunks of 128 and 92-96 in one pass (OpenBLAS: 87-92;
// docs/PERFORMANCE_HISTORY.md, nineteenth round). The column block's op(B) is then up to
// 2,048 x 16 floats (128 KiB): read from L2 in one stream (B in 16-column panels), which the
// 6 x 16 tile's 12 multiply-adds per 64 bytes of B leave time for.
constexpr std::size_t kPanelRows = 256, kMinPanelRows = 48;
constexpr Blocking kBlocking_narrow{128, kPanelRows * 128}, kBlocking_wide_k{2048, std::size_t(1) << 15};

// A path's tiles. small: products of at most 32 rows and small_gemm, 16 columns and few rows
// (fewer rows of a tail tile wasted), yet 8 accumulators (AVX-512 8 x 16, AVX2 4 x 16): with
// K = 16 a tile is a chain of 16 dependent multiply-adds per accumulator, and 4 of them left
// the FMA units idle half the time (the reverse model's six 16 x 16 x 16 head products,
// BM_head_gemms: 612 ns with AVX-512 4 x 16 tiles, 519 with 8 x 16, on a Zen 5; these now run
// tiny_gemm: 16 chains at once on AVX-512, 12 on AVX2); large: 16 accumulators on AVX-512 (8 x 32,
// 16 of 32 zmm), as many as the registers hold on AVX2 (6 x 16: 12 of 16 ymm); tall, products of
// kTallMinRows rows or more: AVX-512 12 x 32 (24 zmm accumulate, 14 loads per 24 multiply-adds
// instead of 10 per 16; a panel's last tile of up to 8 rows on an 8 x 32 tile), the others as
// large. On a Zen 5 core (AVX-512 units 512 bits wide) the MHA projections' six products ran
// 69.5 -> 63.1 ms on the tiles, MHA large forward + backward 2.7-3.2% faster beside OpenBLAS's
// Haswell kernels and even beside its Cooperlake ones (the tiles then run the heads only),
// the reverse model's step 0.5-1.2% faster (paired in one process, thirty-second round); 14 x 32
// was no better than 12 x 32. Under kTallMinRows (attention's 64-row blocks) the 12-row tiles'
// last tile would waste more rows than the fewer loads save (heads at large: 1.4% slower).
// narrow: the large tiles' rows for N <= 16. bpanel: the path's column-panel width (bpanel_width), its
// widest tile's W, so that a tile's column block of op(B) is one contiguous stretch (AVX2's
// 16-column tiles in 32-column panels read half of every 128 bytes: a K 512 column block's
// 32 KiB spread over 64 KiB, and the projections' shapes at 88-90 GFLOP/s against 93-96 in
// 16-column panels on a Zen 3).
constexpr std::size_t kTallMinRows = 192;
struct Tilings {
  Tiling small, narrow, large, tall;
  Blocking blocking;
  std::size_t bpanel;
};
#ifdef XGRAD_TILED_GEMM_X86
const Tilings kTilings_avx512{{tiles_avx512<8, 1>, 8, 16},
                              {tiles_avx512<8, 1>, 8, 16},
                              {tiles_avx512<8, 2>, 8, 32},
                              {tiles_avx512<12, 2>, 12, 32, tiles_avx512<8, 2>, 8},
                              kBlocking_narrow,
                              32};
const Tilings kTilings_avx2{{tiles_avx2<4, 2>, 4, 16},
                            {tiles_avx2<6, 2>, 6, 16, tiles_avx2<4, 2>, 4},
                            {tiles_avx2<6, 2>, 6, 16, tiles_avx2<4, 2>, 4},
                            {tiles_avx2<6, 2>, 6, 16, tiles_avx2<4, 2>, 4},
                            kBlocking_wide_k,
                            16};
#endif
const Tilings kTilings_baseline{{tiles_baseline<4, 16>, 4, 16}, {tiles_baseline<4, 16>, 4, 16},
                                {tiles_baseline<4, 16>, 4, 16}, {tiles_baseline<4, 16>, 4, 16}, kBlocking_narrow, 16};

// Runs the product on tiny_gemm_avx512 or tiny_gemm_avx2 when it fits (at most 16 rows and 16
// columns, either path) and says whether it did; Bk as rows, row stride ldb. run_tiles' first step, so
// every entry point (tiled_gemm, tiled_gemm_bpanels, small_gemm) takes it.
bool tiny_gemm(bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
               std::size_t lda, const float* Bk, std::size_t ldb, float beta, float* C, std::size_t ldc,
               const float* bias) {
#ifdef XGRAD_TILED_GEMM_X86
  if (M == 0 || M > 16 || N == 0 || N > 16) return false;
  const CpuPath path = cpu_path();
  if (path == CpuPath::Avx2) return tiny_gemm_avx2(trans_a, M, N, K, alpha, A, lda, Bk, ldb, beta, C, ldc, bias), true;
  if (path != CpuPath::Avx512) return false;
  if (M <= 8) tiny_gemm_avx512<8>(trans_a, M, N, K, alpha, A, lda, Bk, ldb, beta, C, ldc, bias);
  else tiny_gemm_avx512<16>(trans_a, M, N, K, alpha, A, lda, Bk, ldb, beta, C, ldc, bias);
  return true;
#else
  return false;
#endif
}

// Column blocks outer within a panel: a block's W columns of Bk stay in L1 while every row
// tile reads them.
// Bk as rows (bpanel 0: row k at Bk + k * ldb) or in column panels of bpanel columns (a
// multiple of the tiling's W; ldb unused): columns [p bpanel, (p + 1) bpanel) at Bk + p bpanel K,
// row k of them at + k bpanel. A column block's K rows are then one stretch, where as rows they
// lie ldb apart (a long key panel: each column block then starts with K cache misses that the
// prefetchers do not foresee).
void run_tiles(const Tiling& tl, const Blocking& bl, bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha,
               const float* A, std::size_t lda, const float* Bk, std::size_t ldb, float beta, float* C,
               std::size_t ldc, const float* bias, std::size_t bpanel = 0, const std::size_t* rows = nullptr,
               const std::size_t* ks = nullptr) {
  if ((ks && bpanel) || (rows && trans_a))
    throw std::logic_error("tiled_gemm: a k map with op(B) in panels, or a row map with op(A) transposed");
  // N <= 16 <= bpanel: op(B) is one panel, rows bpanel apart
  if (!rows && !ks && tiny_gemm(trans_a, M, N, K, alpha, A, lda, Bk, bpanel ? bpanel : ldb, beta, C, ldc, bias)) return;
  const std::size_t R = tl.rows, W = tl.cols;
  const std::size_t ra = trans_a ? 1 : lda, ka = trans_a ? lda : 1;  // a_ik = A[i * ra + k * ka]
  const bool chunked = K > bl.chunk;
  const std::size_t kc = chunked ? bl.chunk : std::max<std::size_t>(K, 1);
  // whole tiles: a panel's last tile ends inside it
  const std::size_t panel = std::clamp(bl.panel_floats / kc, kMinPanelRows, kPanelRows) / R * R;
  // raw sums between chunks: one R x W tile per tile of the panel's rows of C, row stride ldp
  const std::size_t ldp = (N + W - 1) / W * W;
  const auto partial = aligned_buffer<float>(chunked ? std::min(panel, (M + R - 1) / R * R) * ldp : 0);
  // a k map's element offsets (TileArgs)
  const auto koff = aligned_buffer<std::size_t>(ks ? 2 * K : 0);
  for (std::size_t k = 0; ks && k < K; ++k) koff[2 * k] = ks[k] * ka, koff[2 * k + 1] = ks[k] * ldb;
  for (std::size_t p0 = 0; p0 < M; p0 += panel)
    for (std::size_t k0 = 0; k0 == 0 || k0 < K; k0 += kc) {  // K = 0: one pass, C = beta C
      const std::size_t kn = std::min(kc, K - k0);
      for (std::size_t j0 = 0; j0 < N; j0 += W) {
        const std::size_t p1 = std::min(M, p0 + panel);
        const float* b = bpanel ? Bk + j0 / bpanel * bpanel * K + k0 * bpanel + j0 % bpanel
                         : ks   ? Bk + j0
                                : Bk + k0 * ldb + j0;
        TileRun run{ks ? A : A + k0 * ka, ra, ka, M, p0, p1, rows, b, bpanel ? bpanel : ldb, kn, ks ? koff.get() + 2 * k0 : nullptr,
                    alpha, beta, C + j0, ldc,
                    std::min(W, N - j0), chunked ? partial.get() + j0 : nullptr, ldp, p0, k0 == 0, k0 + kn >= K,
                    bias ? bias + j0 : nullptr};
        // the panel's last tile, when it has at most tail_rows rows (only the product's last can), in a tail tile
        const std::size_t last = p0 + (p1 - p0 - 1) / R * R;
        if (tl.tail && std::min(R, M - last) <= tl.tail_rows) {
          run.end = last;
          if (last > p0) tl.tiles(run);
          run.first = last, run.end = p1;
          tl.tail(run);
        } else {
          tl.tiles(run);
        }
      }
    }
}

// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols.
void transpose_baseline(std::size_t rows, std::size_t cols, const float* src, std::size_t lds, float* dst,
                        std::size_t ldd) {
  constexpr std::size_t kBlock = 16;  // reads and writes stay within 16 cache lines
  for (std::size_t i0 = 0; i0 < rows; i0 += kBlock)
    for (std::size_t j0 = 0; j0 < cols; j0 += kBlock)
      for (std::size_t i = i0, i1 = std::min(rows, i0 + kBlock); i < i1; ++i)
        for (std::size_t j = j0, j1 = std::min(cols, j0 + kBlock); j < j1; ++j) dst[j * ldd + i] = src[i * lds + j];
}
#ifdef XGRAD_TILED_GEMM_X86
// Block order of the register transposes below: the shorter side inner, so that a run of
// blocks reads or writes whole rows of the longer side and touches only `shorter side` lines of
// the other, which stay in L1 for the next run. Source rows outer when a (512, 64) K is packed
// into K^T; destination rows outer when dK^T (64, 512) is stored into dK at a 6 KiB row stride,
// where source rows outer wrote 32 bytes into each of 512 destination lines per run (18 GB/s
// on a Zen 3, against 49 GB/s for the K^T pack).
// dst[j * ldd + i] = rows[i][j] for i, j < 8: unpack, shuffle, lane permute.
XGRAD_TARGET_AVX2 inline __attribute__((always_inline)) void transpose8x8_avx2(const float* const* rows, float* dst,
                                                                              std::size_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows[i]);
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(dst + j * ldd, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ldd, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
}
// 8 x 8 blocks in registers (transpose8x8_avx2); the edges as the baseline.
XGRAD_TARGET_AVX2 void transpose_avx2(std::size_t rows, std::size_t cols, const float* src, std::size_t lds,
                                      float* dst, std::size_t ldd) {
  const std::size_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  const bool rows_outer = c8 <= r8;  // the shorter side inner (the block order above)
  for (std::size_t o = 0, no = rows_outer ? r8 : c8, ni = rows_outer ? c8 : r8; o < no; o += 8)
    for (std::size_t in = 0; in < ni; in += 8) {
      const std::size_t i0 = rows_outer ? o : in, j0 = rows_outer ? in : o;
      const float* rows8[8];
      for (std::size_t i = 0; i < 8; ++i) rows8[i] = src + (i0 + i) * lds + j0;
      transpose8x8_avx2(rows8, dst + j0 * ldd + i0, ldd);
    }
  if (c8 < cols) transpose_baseline(r8, cols - c8, src + c8, lds, dst + c8 * ldd, ldd);
  if (r8 < rows) transpose_baseline(rows - r8, cols, src + r8 * lds, lds, dst + r8, ldd);
}
// 16 x 16 blocks in registers: unpack and shuffle within 128-bit lanes (4 x 4 blocks), then two
// rounds of lane shuffles; the edges as the AVX2 variant.
XGRAD_TARGET_AVX512 void transpose_avx512(std::size_t rows, std::size_t cols, const float* src, std::size_t lds,
                                          float* dst, std::size_t ldd) {
  const std::size_t r16 = rows / 16 * 16, c16 = cols / 16 * 16;
  const bool rows_outer = c16 <= r16;  // the shorter side inner (the block order above)
  for (std::size_t o = 0, no = rows_outer ? r16 : c16, ni = rows_outer ? c16 : r16; o < no; o += 16)
    for (std::size_t in = 0; in < ni; in += 16) {
      const std::size_t i0 = rows_outer ? o : in, j0 = rows_outer ? in : o;
      const float* s = src + i0 * lds + j0;
      __m512 r[16], t[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * lds);
      for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      // after this r[g + c] (g = 0, 4, 8, 12), lane L: rows g .. g + 3 of column 4L + c
      for (int g = 0; g < 16; g += 4) {
        r[g] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      // column 4L + c of dst's block = lanes L of r[c], r[4 + c], r[8 + c], r[12 + c]
      float* d = dst + j0 * ldd + i0;
      for (int c = 0; c < 4; ++c) {
        const __m512 lo0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), hi0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 lo1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44), hi1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        _mm512_storeu_ps(d + c * ldd, _mm512_shuffle_f32x4(lo0, lo1, 0x88));
        _mm512_storeu_ps(d + (4 + c) * ldd, _mm512_shuffle_f32x4(lo0, lo1, 0xDD));
        _mm512_storeu_ps(d + (8 + c) * ldd, _mm512_shuffle_f32x4(hi0, hi1, 0x88));
        _mm512_storeu_ps(d + (12 + c) * ldd, _mm512_shuffle_f32x4(hi0, hi1, 0xDD));
      }
    }
  if (c16 < cols) transpose_avx2(r16, cols - c16, src + c16, lds, dst + c16 * ldd, ldd);
  if (r16 < rows) transpose_avx2(rows - r16, cols, src + r16 * lds, lds, dst + r16, ldd);
}

// The AVX2 path's products with op(A) = A^T over a long K (weight gradients dW = G^T X, K the
// positions) run on op(A) packed as rows and op(B) packed into column panels, through the k map
// if there is one (tiled_gemm). Read in place, each k of a 6-row tile is a new cache line of A,
// and under a k map (G's zero rows skipped) a row of B wherever it lies plus two offsets to
// load: on a Zen 3 the reverse model's dW products with their zero rows skipped ran at 47-59
// GFLOP/s on the performed FLOPs, packed (packing included) 0.60-0.75 of that time at 64-192
// x 64-128 over 574 of 1,024 positions (0.96 at 11 x 64); without a map 0.72-0.81 at 64-192
// x 64-128 over 544 in two of three runs (0.78-1.09 in the third), 1.13-1.64 at 11 x 64, where
// copying B is most of the work: so without a map only from 64 rows. The training step paired
// in one process: -4.7% and -4.9% over every position, -1.1% and -2.7% with the padding
// skipped (docs/PERFORMANCE_HISTORY.md, twenty-eighth round). The same fused multiply-adds in
// the same order of k: the same bits. Unmeasured on an AVX-512 CPU, whose path reads A in place.
constexpr std::size_t kPackAMinK = 256, kPackAMinRows = 64, kPackAMaxFloats = std::size_t(1) << 22;  // (M + N) K
bool packs_transposed_a(bool trans_a, std::size_t M, std::size_t N, std::size_t K, const std::size_t* ks) {
  return trans_a && K >= kPackAMinK && (ks || M >= kPackAMinRows) && (M + N) * K <= kPackAMaxFloats &&
         cpu_path() == CpuPath::Avx2;
}

// The packed operands' scratch, per thread and kept (grown, never shrunk; at most
// kPackAMaxFloats + 16 floats, 16 MiB): blocks above the block cache's 64 KiB would otherwise
// come from malloc on every product, and without tune_allocator glibc maps and unmaps them each
// time (M 64, N 64, K 544: 2.7x the time in page faults).
float* packed_operands_scratch(std::size_t floats) {
  thread_local AlignedBuffer<float> scratch;
  thread_local std::size_t capacity = 0;
  if (floats > capacity) scratch.reset(), scratch = aligned_buffer<float>(floats), capacity = floats;
  return scratch.get();
}

// op(A) of a product with op(A) = A^T, as rows: dst[i * ldd + k] = A[k' * lda + i] for i < M,
// k < K, k' = ks[k] (a k map) or k. 8 x 8 blocks in registers (transpose8x8_avx2), 8 rows k'
// of A at a time.
XGRAD_TARGET_AVX2 void pack_transposed_a_avx2(std::size_t K, std::size_t M, const float* A, std::size_t lda,
                                              const std::size_t* ks, float* dst, std::size_t ldd) {
  const std::size_t k8 = K / 8 * 8, m8 = M / 8 * 8;
  for (std::size_t k0 = 0; k0 < k8; k0 += 8) {
    const float* s[8];
    for (std::size_t k = 0; k < 8; ++k) s[k] = A + (ks ? ks[k0 + k] : k0 + k) * lda;
    for (std::size_t i0 = 0; i0 < m8; i0 += 8) {
      const float* rows8[8];
      for (std::size_t k = 0; k < 8; ++k) rows8[k] = s[k] + i0;
      transpose8x8_avx2(rows8, dst + i0 * ldd + k0, ldd);
    }
    for (std::size_t k = 0; k < 8; ++k)
      for (std::size_t i = m8; i < M; ++i) dst[i * ldd + k0 + k] = s[k][i];
  }
  for (std::size_t k = k8; k < K; ++k) {
    const float* s = A + (ks ? ks[k] : k) * lda;
    for (std::size_t i = 0; i < M; ++i) dst[i * ldd + k] = s[i];
  }
}
#endif

}  // namespace

void transpose(std::size_t rows, std::size_t cols, const float* src, std::size_t lds, float* dst, std::size_t ldd) {
  XGRAD_ISA_SELECT(transpose)(rows, cols, src, lds, dst, ldd);
}

namespace {
// The path's tiles (selected by address: a copy of the three Tilings per call was ~1% of the
// reverse model's step, which makes ~3,000 head products) and the tiling of an M x N product on
// it (the bits do not depend on it: each element is the same function either way).
const Tilings& path_tilings() {
#ifdef XGRAD_TILED_GEMM_X86
  return *isa_select(&kTilings_avx512, &kTilings_avx2, &kTilings_baseline);
#else
  return kTilings_baseline;
#endif
}
const Tiling& tiling_for(const Tilings& t, std::size_t M, std::size_t N) {
  return M <= kSmallGemmMax ? t.small : N <= 16 ? t.narrow : M >= kTallMinRows ? t.tall : t.large;
}
}  // namespace

std::size_t bpanel_width() { return path_tilings().bpanel; }

void tiled_gemm(bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                std::size_t lda, const float* Bk, std::size_t ldb, float beta, float* C, std::size_t ldc,
                const float* bias, const std::size_t* rows, const std::size_t* ks) {
  if (M == 0 || N == 0) return;
  // tiny products (attention heads) before run_tiles' set-up: ~6 ns of a 16 x 16 x 16 product's
  // ~85 (AVX-512), paired
  if (!rows && !ks && tiny_gemm(trans_a, M, N, K, alpha, A, lda, Bk, ldb, beta, C, ldc, bias)) return;
  const Tilings& t = path_tilings();
#ifdef XGRAD_TILED_GEMM_X86
  if (!rows && packs_transposed_a(trans_a, M, N, K, ks)) {  // (a row map with A^T: run_tiles' logic_error)
    const std::size_t lda2 = panel_stride(K), w = t.bpanel, a_floats = (M * lda2 + 15) / 16 * 16;
    float* const a = packed_operands_scratch(a_floats + bpanels_size(N, K, w));
    float* const b = a + a_floats;
    pack_transposed_a_avx2(K, M, A, lda, ks, a, lda2);
    pack_bpanels(false, K, N, Bk, ldb, b, w, ks);
    return run_tiles(tiling_for(t, M, N), t.blocking, false, M, N, K, alpha, a, lda2, b, 0, beta, C, ldc, bias, w);
  }
#endif
  run_tiles(tiling_for(t, M, N), t.blocking, trans_a, M, N, K, alpha, A, lda, Bk, ldb, beta, C, ldc, bias, 0, rows, ks);
}

void tiled_gemm_bpanels(bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                        std::size_t lda, const float* Bp, std::size_t width, float beta, float* C, std::size_t ldc,
                        const float* bias, const std::size_t* rows) {
  if (M == 0 || N == 0) return;
  const Tilings& t = path_tilings();
  const Tiling& tl = tiling_for(t, M, N);
  if (width == 0 || width % tl.cols != 0)
    throw std::logic_error("tiled_gemm_bpanels: the panel width is not a multiple of the tile width");
  run_tiles(tl, t.blocking, trans_a, M, N, K, alpha, A, lda, Bp, 0, beta, C, ldc, bias, width, rows);
}

namespace {
// dst[k * ldd + j] = B[k' * ldb + j] for k < K, j < n, k' = ks[k] (a k map) or k. W: n known at
// compile time (a whole panel), so that each row is a few vector moves, not a call to memmove
// (the reverse model's weight gradients copy 574 rows x 4-12 panels of 16 floats per product:
// memmove was 3.0-3.5% of the training step's samples on a Zen 3; paired in one process the
// step with every position 0.995, 0.983, 0.998 of the time, with the padding skipped 0.990,
// 0.985; a near-identical variant measured even in the twenty-eighth round: at most ~1%). The
// same floats copied.
template <std::size_t W>
void copy_panel_rows(std::size_t K, const float* B, std::size_t ldb, const std::size_t* ks, float* dst,
                     std::size_t ldd, std::size_t n = W) {
  for (std::size_t k = 0; k < K; ++k) {
    const float* src = B + (ks ? ks[k] : k) * ldb;
    if constexpr (W != 0) std::memcpy(dst + k * ldd, src, W * sizeof(float));
    else std::copy_n(src, n, dst + k * ldd);
  }
}
}  // namespace

void pack_bpanels(bool trans_b, std::size_t K, std::size_t N, const float* B, std::size_t ldb, float* dst,
                  std::size_t w, const std::size_t* ks) {
  if (ks && trans_b) throw std::logic_error("pack_bpanels: a k map with B transposed");
  for (std::size_t j0 = 0; j0 < N; j0 += w) {
    const std::size_t n = std::min(w, N - j0);
    float* panel = dst + j0 * K;
    if (trans_b) {
      transpose(n, K, B + j0 * ldb, ldb, panel, w);  // B^T rows [j0, j0 + n) -> (K, n)
    } else {
      if (n == 16) copy_panel_rows<16>(K, B + j0, ldb, ks, panel, w);
      else if (n == 32) copy_panel_rows<32>(K, B + j0, ldb, ks, panel, w);
      else copy_panel_rows<0>(K, B + j0, ldb, ks, panel, w, n);
    }
  }
}

void small_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc,
                const float* bias) {
  alignas(64) float panel[kSmallGemmMax * kSmallGemmMax];  // (K, N) = B^T for a transposed B
  if (trans_b) transpose(N, K, B, ldb, panel, N);
  const Tilings& t = path_tilings();
  run_tiles(t.small, t.blocking, trans_a, M, N, K, alpha, A, lda, trans_b ? panel : B, trans_b ? N : ldb, beta,
            C, ldc, bias);
}

}  // namespace xgrad::detail
