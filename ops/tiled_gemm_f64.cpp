// xgrad's own float64 GEMM (declared in ops/detail.hpp: tiled_gemm_f64, its two steps
// pack_f64_bpanels and tiled_gemm_f64_bpanels, own_f64_kernels), for
// CPUs whose OpenBLAS runs generic pre-AVX kernels: Debian's OpenBLAS 0.3.21 does not know e.g.
// the Intel Xeons of family 6 model 207 and falls back to its Prescott (SSE2/SSE3) kernels
// there, which made the float64 products of gradient checks and Hessians most of their time
// (the gradexp example: ~50% of it in dgemm_kernel_PRESCOTT). gemm<double> runs this instead
// wherever OpenBLAS's kernel family is such a fallback and xgrad runs its AVX2 or AVX-512 path
// (own_f64_kernels); everywhere else float64 stays on OpenBLAS.
//
// op(A) is read in place, op(B) packed once per product into column panels of W columns (zeros
// past column N - 1: a panel is one contiguous stretch, where B's own rows at a row stride of a
// multiple of 1 KiB share a few L1 sets):
//   a_ik = A[min(i, M - 1) lda + k] (A[k lda + min(i, M - 1)] transposed: rows past M - 1 repeat
//          the last, computed and never stored)
//   b_kj = Bp[(p K + k) W + j - p W] for j in panel p
//   tile (rows i0 .. i0 + R - 1, columns j0 .. j0 + W - 1):
//     acc_ij = sum_{k = 0 .. K-1} a_ik b_kj        in order of k, one fused multiply-add per k
//     C_ij   = alpha acc_ij                         beta 0: C is not read
//     C_ij   = alpha acc_ij + beta C_ij             both products rounded, then the sum
//     C_ij   = alpha acc_ij + bias_j                (beta 0) the product rounded, then the sum
// Every element of C is the same function of its row of op(A) and its column of op(B), whatever
// M, N, the tile or block it falls in, or the block gemm cut the product into: the same bits
// for any thread count, and on the AVX-512 (8 x 16 tiles) and AVX2 (6 x 8) paths alike.
// op(A) is never copied, and op(B)'s copy is small against the product but for a few rows of
// C. Large products run in row blocks whose op(A) takes ~256 KiB
// (L2) while every column panel passes over it, or column panel by column panel over all rows
// when that streams fewer bytes; a long K (the weight gradients over thousands of positions) in
// chunks of k, raw sums carried between them.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "xgrad/ops/avx512.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/isa.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define XGRAD_F64_X86 1
#endif

namespace xgrad::detail {
namespace {

struct GemmF64 {
  bool trans_a;
  std::size_t M, N, K;
  double alpha, beta;
  const double* A;
  std::size_t lda;
  const double* B;     // op(B) in column panels (panel_stride = K W, ldb = W)
  std::size_t ldb, panel_stride;
  double* C;
  std::size_t ldc;
  const double* bias;  // N values, or null
};

// k in one pass up to kOnePassK, beyond it in chunks of kChunkK (rows in blocks of kChunkRows).
// Measured on a Xeon family 6 model 207 (1 thread, interleaved): chunks took the long-K weight
// gradient 96 x 32 x 8,704 (TN) from 2.8-3.0 to 1.3-1.7 ms; at 1,024^3 one pass and chunks both
// ran in 35-51 ms (that machine's noise), so up to K 1,024 the single pass stays.
constexpr std::size_t kOnePassK = 1024, kChunkK = 256, kChunkRows = 128;

// One pass of the tiles: rows [i_begin, i_end), k in [k0, k1). Unless first, the tiles' sums
// start from the raw ones at partial (row stride ldp: the rows from i_begin, every panel's
// columns); unless last, they end there, raw, instead of in C. A float64 sum carried on from
// its stored value is the same chain of roundings: the chunks do not change a bit.
struct Chunk {
  std::size_t i_begin, i_end, k0, k1;
  bool first, last;
  double* partial;
  std::size_t ldp;
};

#ifdef XGRAD_F64_X86
// Keeps the vector x a rounded product: the compiler may not fuse it into the add that follows.
#define XGRAD_ROUNDED(x) __asm__("" : "+v"(x))
#define XGRAD_UNROLL _Pragma("GCC unroll 16")

// The R x 16 tile at rows i0.., column panel p (columns p 16 .. + cols - 1): 2 vectors of 8.
template <bool Masked>
XGRAD_TARGET_AVX512 inline __attribute__((always_inline)) void tile_f64_avx512(const GemmF64& g, const Chunk& ch,
                                                                           std::size_t i0, std::size_t p,
                                                                           std::size_t cols) {
  constexpr std::size_t R = 8, W = 16;
  const __mmask8 m0 = Masked ? __mmask8((1u << std::min<std::size_t>(8, cols)) - 1) : __mmask8(0xff);
  const __mmask8 m1 = Masked ? __mmask8(cols > 8 ? (1u << (cols - 8)) - 1 : 0) : __mmask8(0xff);
  const double* ar[R];
  const std::size_t ka = g.trans_a ? g.lda : 1;
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    const std::size_t i = std::min(i0 + r, g.M - 1);
    ar[r] = g.trans_a ? g.A + i : g.A + i * g.lda;
  }
  __m512d acc[R][2];
  // raw sums carried from the previous k chunk (row i0 - ch.i_begin of the scratch), or 0
  double* partial = ch.partial ? ch.partial + (i0 - ch.i_begin) * ch.ldp + p * W : nullptr;
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    acc[r][0] = ch.first ? _mm512_setzero_pd() : _mm512_load_pd(partial + r * ch.ldp);
    acc[r][1] = ch.first ? _mm512_setzero_pd() : _mm512_load_pd(partial + r * ch.ldp + 8);
  }
  const double* b = g.B + p * g.panel_stride + ch.k0 * W;
  const std::size_t ldb = g.ldb, k1 = ch.k1;
  for (std::size_t k = ch.k0, at = ch.k0 * ka; k < k1; ++k, at += ka, b += ldb) {
    const __m512d b0 = Masked ? _mm512_maskz_loadu_pd(m0, b) : _mm512_loadu_pd(b);
    const __m512d b1 = Masked ? _mm512_maskz_loadu_pd(m1, b + 8) : _mm512_loadu_pd(b + 8);
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
      const __m512d x = _mm512_set1_pd(ar[r][at]);
      acc[r][0] = _mm512_fmadd_pd(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_pd(x, b1, acc[r][1]);
    }
  }
  if (!ch.last) {
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
      _mm512_store_pd(partial + r * ch.ldp, acc[r][0]);
      _mm512_store_pd(partial + r * ch.ldp + 8, acc[r][1]);
    }
    return;
  }
  const __m512d va = _mm512_set1_pd(g.alpha), vb = _mm512_set1_pd(g.beta);
  __m512d bias0 = _mm512_setzero_pd(), bias1 = _mm512_setzero_pd();
  if (g.bias) {
    bias0 = _mm512_maskz_loadu_pd(m0, g.bias + p * W);
    bias1 = _mm512_maskz_loadu_pd(m1, g.bias + p * W + 8);
  }
  const std::size_t rows = std::min(R, g.M - i0);
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    if (r >= rows) break;
    double* c = g.C + (i0 + r) * g.ldc + p * W;
    __m512d y0 = _mm512_mul_pd(va, acc[r][0]), y1 = _mm512_mul_pd(va, acc[r][1]);
    if (g.bias) {
      XGRAD_ROUNDED(y0);
      XGRAD_ROUNDED(y1);
      y0 = _mm512_add_pd(y0, bias0);
      y1 = _mm512_add_pd(y1, bias1);
    } else if (g.beta != 0.0) {
      __m512d z0 = _mm512_mul_pd(vb, _mm512_maskz_loadu_pd(m0, c));
      __m512d z1 = _mm512_mul_pd(vb, _mm512_maskz_loadu_pd(m1, c + 8));
      XGRAD_ROUNDED(y0);
      XGRAD_ROUNDED(y1);
      XGRAD_ROUNDED(z0);
      XGRAD_ROUNDED(z1);
      y0 = _mm512_add_pd(y0, z0);
      y1 = _mm512_add_pd(y1, z1);
    }
    _mm512_mask_storeu_pd(c, m0, y0);
    _mm512_mask_storeu_pd(c + 8, m1, y1);
  }
}
// Rows [i_begin, i_end) against column panels [p_begin, p_end), tile by tile.
XGRAD_TARGET_AVX512 void tiles_f64_avx512(const GemmF64& g, const Chunk& ch,
                                          std::size_t p_begin, std::size_t p_end) {
  for (std::size_t p = p_begin; p < p_end; ++p) {
    const std::size_t cols = std::min<std::size_t>(16, g.N - p * 16);
    if (cols == 16)
      for (std::size_t i0 = ch.i_begin; i0 < ch.i_end; i0 += 8) tile_f64_avx512<false>(g, ch, i0, p, cols);
    else
      for (std::size_t i0 = ch.i_begin; i0 < ch.i_end; i0 += 8) tile_f64_avx512<true>(g, ch, i0, p, cols);
  }
}

// 64-bit lane l of the 4 lanes at kLaneMask64 + 4 - n is all ones for l < n, zero after.
constexpr long long kLaneMask64[8] = {-1, -1, -1, -1};

// The R x 8 tile at rows i0.., column panel p (columns p 8 .. + cols - 1): 2 vectors of 4.
template <bool Masked>
XGRAD_TARGET_AVX2 inline __attribute__((always_inline)) void tile_f64_avx2(const GemmF64& g, const Chunk& ch,
                                                                           std::size_t i0, std::size_t p,
                                                                           std::size_t cols) {
  constexpr std::size_t R = 6, W = 8;
  const std::size_t n0 = std::min<std::size_t>(4, cols), n1 = cols > 4 ? cols - 4 : 0;
  const __m256i m0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMask64 + 4 - n0));
  const __m256i m1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMask64 + 4 - n1));
  const double* ar[R];
  const std::size_t ka = g.trans_a ? g.lda : 1;
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    const std::size_t i = std::min(i0 + r, g.M - 1);
    ar[r] = g.trans_a ? g.A + i : g.A + i * g.lda;
  }
  __m256d acc[R][2];
  // raw sums carried from the previous k chunk (row i0 - ch.i_begin of the scratch), or 0
  double* partial = ch.partial ? ch.partial + (i0 - ch.i_begin) * ch.ldp + p * W : nullptr;
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    acc[r][0] = ch.first ? _mm256_setzero_pd() : _mm256_load_pd(partial + r * ch.ldp);
    acc[r][1] = ch.first ? _mm256_setzero_pd() : _mm256_load_pd(partial + r * ch.ldp + 4);
  }
  const double* b = g.B + p * g.panel_stride + ch.k0 * W;
  const std::size_t ldb = g.ldb, k1 = ch.k1;
  for (std::size_t k = ch.k0, at = ch.k0 * ka; k < k1; ++k, at += ka, b += ldb) {
    const __m256d b0 = Masked ? _mm256_maskload_pd(b, m0) : _mm256_loadu_pd(b);
    const __m256d b1 = Masked ? _mm256_maskload_pd(b + 4, m1) : _mm256_loadu_pd(b + 4);
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
      const __m256d x = _mm256_broadcast_sd(ar[r] + at);
      acc[r][0] = _mm256_fmadd_pd(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_pd(x, b1, acc[r][1]);
    }
  }
  if (!ch.last) {
    XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
      _mm256_store_pd(partial + r * ch.ldp, acc[r][0]);
      _mm256_store_pd(partial + r * ch.ldp + 4, acc[r][1]);
    }
    return;
  }
  const __m256d va = _mm256_set1_pd(g.alpha), vb = _mm256_set1_pd(g.beta);
  __m256d bias0 = _mm256_setzero_pd(), bias1 = _mm256_setzero_pd();
  if (g.bias) {
    bias0 = _mm256_maskload_pd(g.bias + p * W, m0);
    bias1 = _mm256_maskload_pd(g.bias + p * W + 4, m1);
  }
  const std::size_t rows = std::min(R, g.M - i0);
  XGRAD_UNROLL for (std::size_t r = 0; r < R; ++r) {
    if (r >= rows) break;
    double* c = g.C + (i0 + r) * g.ldc + p * W;
    __m256d y0 = _mm256_mul_pd(va, acc[r][0]), y1 = _mm256_mul_pd(va, acc[r][1]);
    if (g.bias) {
      XGRAD_ROUNDED(y0);
      XGRAD_ROUNDED(y1);
      y0 = _mm256_add_pd(y0, bias0);
      y1 = _mm256_add_pd(y1, bias1);
    } else if (g.beta != 0.0) {
      __m256d z0 = _mm256_mul_pd(vb, _mm256_maskload_pd(c, m0));
      __m256d z1 = _mm256_mul_pd(vb, _mm256_maskload_pd(c + 4, m1));
      XGRAD_ROUNDED(y0);
      XGRAD_ROUNDED(y1);
      XGRAD_ROUNDED(z0);
      XGRAD_ROUNDED(z1);
      y0 = _mm256_add_pd(y0, z0);
      y1 = _mm256_add_pd(y1, z1);
    }
    store_first(c, y0, n0);  // not _mm256_maskstore_pd: microcoded on AMD Zen (ops/avx512.hpp)
    store_first(c + 4, y1, n1);
  }
}
XGRAD_TARGET_AVX2 void tiles_f64_avx2(const GemmF64& g, const Chunk& ch, std::size_t p_begin,
                                      std::size_t p_end) {
  for (std::size_t p = p_begin; p < p_end; ++p) {
    const std::size_t cols = std::min<std::size_t>(8, g.N - p * 8);
    if (cols == 8)
      for (std::size_t i0 = ch.i_begin; i0 < ch.i_end; i0 += 6) tile_f64_avx2<false>(g, ch, i0, p, cols);
    else
      for (std::size_t i0 = ch.i_begin; i0 < ch.i_end; i0 += 6) tile_f64_avx2<true>(g, ch, i0, p, cols);
  }
}
#undef XGRAD_UNROLL
#undef XGRAD_ROUNDED
#endif

}  // namespace

bool own_f64_kernels() {
#ifdef XGRAD_F64_X86
  static const bool generic_blas = blas_core_is_generic(runtime_info().blas_core);
  return generic_blas && cpu_path() != CpuPath::Baseline;
#else
  return false;
#endif
}

std::size_t f64_panel_width() { return cpu_path() == CpuPath::Avx512 ? 16 : 8; }

void pack_f64_bpanels(bool trans_b, std::size_t K, std::size_t N, const double* B, std::size_t ldb, double* dst,
                      std::size_t W) {
  for (std::size_t p = 0; p * W < N; ++p) {
    double* d = dst + p * K * W;
    const std::size_t j0 = p * W, cols = std::min(W, N - j0);
    for (std::size_t k = 0; k < K; ++k, d += W) {
      std::size_t j = 0;
      if (trans_b)
        for (; j < cols; ++j) d[j] = B[(j0 + j) * ldb + k];
      else
        for (; j < cols; ++j) d[j] = B[k * ldb + j0 + j];
      for (; j < W; ++j) d[j] = 0.0;
    }
  }
}

void tiled_gemm_f64(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, double alpha,
                    const double* A, std::size_t lda, const double* B, std::size_t ldb, double beta, double* C,
                    std::size_t ldc, const double* bias) {
  if (M == 0 || N == 0) return;
  const std::size_t W = f64_panel_width();
  AlignedBuffer<double> bp = aligned_buffer<double>(bpanels_size(N, K, W));
  pack_f64_bpanels(trans_b, K, N, B, ldb, bp.get(), W);
  tiled_gemm_f64_bpanels(trans_a, M, N, K, alpha, A, lda, bp.get(), W, beta, C, ldc, bias);
}

void tiled_gemm_f64_bpanels(bool trans_a, std::size_t M, std::size_t N, std::size_t K, double alpha,
                            const double* A, std::size_t lda, const double* Bp, std::size_t width, double beta,
                            double* C, std::size_t ldc, const double* bias) {
#ifdef XGRAD_F64_X86
  if (M == 0 || N == 0) return;
  const bool wide = cpu_path() == CpuPath::Avx512;
  if (!wide && cpu_path() != CpuPath::Avx2)
    throw std::logic_error("tiled_gemm_f64_bpanels: needs the avx2 or avx512 path");
  if (K == 0) return empty_sum_gemm(M, N, beta, C, ldc, bias);
  const std::size_t R = wide ? 8 : 6, W = wide ? 16 : 8, panels = (N + W - 1) / W;
  if (width != W)
    throw std::logic_error("tiled_gemm_f64_bpanels: panel width " + std::to_string(width) + ", this path's is " +
                           std::to_string(W));
  const GemmF64 g{trans_a, M, N, K, alpha, beta, A, lda, Bp, W, K * W, C, ldc, bias};
  const auto run = [&](const Chunk& ch, std::size_t p_begin, std::size_t p_end) {
    if (wide) tiles_f64_avx512(g, ch, p_begin, p_end);
    else tiles_f64_avx2(g, ch, p_begin, p_end);
  };
  if (K <= kOnePassK) {
    // k in one pass. Row blocks of ~32 Ki doubles of op(A) (a whole number of tiles), each passed
    // by every column panel: op(B) streamed once per block. Column panels over all rows instead:
    // op(A) streamed once per panel. Whichever streams fewer doubles.
    const std::size_t block = std::max<std::size_t>(R, (std::size_t(1) << 15) / K / R * R);
    const std::size_t by_blocks = (M + block - 1) / block * K * N, by_panels = panels * M * K;
    if (by_blocks <= by_panels) {
      for (std::size_t i0 = 0; i0 < M; i0 += block)
        run(Chunk{i0, std::min(M, i0 + block), 0, K, true, true, nullptr, 0}, 0, panels);
    } else {
      for (std::size_t p = 0; p < panels; ++p) run(Chunk{0, M, 0, K, true, true, nullptr, 0}, p, p + 1);
    }
    return;
  }
  // k in chunks of kChunkK, rows in blocks of ~kChunkRows: a block's chunk of op(A) (~256 KiB)
  // stays in L2 while every column panel's chunk (kChunkK x W doubles, in L1) passes over it; the
  // block's raw sums wait in a scratch of its rows x every panel's columns between chunks.
  const std::size_t rows = kChunkRows / R * R, ldp = panels * W;
  auto scratch = aligned_buffer<double>((std::min(rows, M) + R - 1) / R * R * ldp);
  for (std::size_t i0 = 0; i0 < M; i0 += rows)
    for (std::size_t k0 = 0; k0 < K; k0 += kChunkK) {
      const std::size_t k1 = std::min(K, k0 + kChunkK);
      run(Chunk{i0, std::min(M, i0 + rows), k0, k1, k0 == 0, k1 == K, scratch.get(), ldp}, 0, panels);
    }
#else
  (void)trans_a, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)Bp, (void)width, (void)beta,
      (void)C, (void)ldc, (void)bias;
  throw std::logic_error("tiled_gemm_f64_bpanels: not built for this target");
#endif
}

}  // namespace xgrad::detail
