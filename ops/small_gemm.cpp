// Small float32 GEMMs without BLAS's per-call cost (declared in ops/detail.hpp).
//
// A 16x16x16 product is 4,096 multiply-adds: 256 AVX-512 or 512 AVX2 FMAs. OpenBLAS spends
// ~3,000 instructions per call around them (argument checks, buffer set-up, packing both
// operands into its panels), and the reverse model's training step makes 3,072 such calls
// (its attention heads: T = S = D = 16). With every dimension <= kSmallGemmMax the product
// runs here instead.
//
//   C (M, N) = alpha op(A) op(B) + beta C          op(A) (M, K), op(B) (K, N)
//   panel (K, NP) = op(B), NP = N rounded up to kCols, zero columns after N; B itself when
//   it is not transposed and N is a multiple of kCols (its rows are then read in place)
//   for each tile of kRows rows i and kCols columns j (micro-kernel tile_*):
//     acc_ij = sum_{k = 0 .. K-1} a_ik b_kj        in order of k, one multiply-add per k
//     C_ij   = alpha acc_ij (+ beta C_ij if beta != 0; C is never read for beta 0)
//   the micro-kernel writes C itself: its rows and columns inside C only (masked vector
//   stores for a column tail), products alpha acc and beta C each rounded, then their sum
//
// Every element of C is the same function of its row of op(A) and its column of op(B),
// whatever M, N, the tile it falls in or the thread count. The AVX-512 and AVX2 micro-kernels
// fuse each multiply-add (one rounding, the same bits on both paths); the baseline one rounds
// the product and then the sum.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/isa.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define XGRAD_SMALL_GEMM_X86 1
#endif

namespace xgrad::detail {
namespace {

constexpr std::size_t kRows = 4;   // rows of C per tile
constexpr std::size_t kCols = 16;  // columns of C per tile: one AVX-512 register, two AVX2 ones
constexpr std::size_t round_up_to_tile(std::size_t n) { return (n + kCols - 1) / kCols * kCols; }  // NP of N
constexpr std::size_t kPanelCols = round_up_to_tile(kSmallGemmMax);

// The tile of C at c (row stride ldc), rows r < rows <= kRows, columns l < cols <= kCols:
//   acc_rl = sum_k a[r][k * ka] b[k * ldb + l]     in order of k; b: kCols readable columns a row
//   c_rl   = alpha acc_rl                          beta == 0: C is not read
//   c_rl   = alpha acc_rl + beta c_rl              beta != 0: both products rounded, then the sum
using Tile = void (*)(const float* const* a, std::size_t ka, const float* b, std::size_t ldb, std::size_t K,
                      float alpha, float beta, float* c, std::size_t ldc, std::size_t rows, std::size_t cols);

void tile_baseline(const float* const* a, std::size_t ka, const float* b, std::size_t ldb, std::size_t K, float alpha,
                   float beta, float* c, std::size_t ldc, std::size_t rows, std::size_t cols) {
  float acc[kRows][kCols] = {};
  for (std::size_t k = 0; k < K; ++k, b += ldb)
    for (std::size_t r = 0; r < kRows; ++r) {
      const float x = a[r][k * ka];
      for (std::size_t l = 0; l < kCols; ++l) acc[r][l] += x * b[l];
    }
  for (std::size_t r = 0; r < rows; ++r, c += ldc)
    if (beta == 0.0f)
      for (std::size_t l = 0; l < cols; ++l) c[l] = alpha * acc[r][l];
    else
      for (std::size_t l = 0; l < cols; ++l) c[l] = alpha * acc[r][l] + beta * c[l];
}

#ifdef XGRAD_SMALL_GEMM_X86
// Keeps the vector x a rounded product: the compiler may not fuse it into the add that
// follows (the baseline kernel, built without FMA, rounds it too).
#define XGRAD_ROUNDED(x) __asm__("" : "+v"(x))

XGRAD_TARGET_AVX512 void tile_avx512(const float* const* a, std::size_t ka, const float* b, std::size_t ldb,
                                     std::size_t K, float alpha, float beta, float* c, std::size_t ldc,
                                     std::size_t rows, std::size_t cols) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  for (std::size_t k = 0, at = 0; k < K; ++k, at += ka, b += ldb) {
    const __m512 bk = _mm512_loadu_ps(b);
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(a0[at]), bk, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(a1[at]), bk, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(a2[at]), bk, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(a3[at]), bk, c3);
  }
  const __m512 acc[kRows] = {c0, c1, c2, c3};
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __mmask16 m = __mmask16((1u << cols) - 1);  // lanes l < cols
  for (std::size_t r = 0; r < rows; ++r, c += ldc) {
    __m512 y = _mm512_mul_ps(va, acc[r]);
    if (beta != 0.0f) {
      __m512 z = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, c));
      XGRAD_ROUNDED(y);
      XGRAD_ROUNDED(z);
      y = _mm512_add_ps(y, z);
    }
    _mm512_mask_storeu_ps(c, m, y);
  }
}

// 32-bit lane l of the 8 lanes at kLaneMask + kCols - n is all ones for l < n, zero after.
constexpr std::int32_t kLaneMask[2 * kCols] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};

XGRAD_TARGET_AVX2 void tile_avx2(const float* const* a, std::size_t ka, const float* b, std::size_t ldb,
                                 std::size_t K, float alpha, float beta, float* c, std::size_t ldc, std::size_t rows,
                                 std::size_t cols) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  for (std::size_t k = 0, at = 0; k < K; ++k, at += ka, b += ldb) {
    const __m256 lo = _mm256_loadu_ps(b), hi = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a0 + at);
    c0 = _mm256_fmadd_ps(x, lo, c0), c1 = _mm256_fmadd_ps(x, hi, c1);
    x = _mm256_broadcast_ss(a1 + at);
    c2 = _mm256_fmadd_ps(x, lo, c2), c3 = _mm256_fmadd_ps(x, hi, c3);
    x = _mm256_broadcast_ss(a2 + at);
    c4 = _mm256_fmadd_ps(x, lo, c4), c5 = _mm256_fmadd_ps(x, hi, c5);
    x = _mm256_broadcast_ss(a3 + at);
    c6 = _mm256_fmadd_ps(x, lo, c6), c7 = _mm256_fmadd_ps(x, hi, c7);
  }
  const __m256 acc[2 * kRows] = {c0, c1, c2, c3, c4, c5, c6, c7};
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  const std::int32_t* mask = kLaneMask + kCols - cols;
  const __m256i m_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask)),
                m_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask + 8));
  const bool full = cols >= kCols;
  for (std::size_t r = 0; r < rows; ++r, c += ldc) {
    __m256 y[2] = {_mm256_mul_ps(va, acc[2 * r]), _mm256_mul_ps(va, acc[2 * r + 1])};
    if (beta != 0.0f) {
      __m256 z[2] = {_mm256_mul_ps(vb, full ? _mm256_loadu_ps(c) : _mm256_maskload_ps(c, m_lo)),
                     _mm256_mul_ps(vb, full ? _mm256_loadu_ps(c + 8) : _mm256_maskload_ps(c + 8, m_hi))};
      for (int h = 0; h < 2; ++h) {
        XGRAD_ROUNDED(y[h]);
        XGRAD_ROUNDED(z[h]);
        y[h] = _mm256_add_ps(y[h], z[h]);
      }
    }
    if (full) {
      _mm256_storeu_ps(c, y[0]);
      _mm256_storeu_ps(c + 8, y[1]);
    } else {
      _mm256_maskstore_ps(c, m_lo, y[0]);
      _mm256_maskstore_ps(c + 8, m_hi, y[1]);
    }
  }
}
#undef XGRAD_ROUNDED
#endif

}  // namespace

void small_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
  const Tile tile = XGRAD_ISA_SELECT(tile);
  const float* b = B;  // op(B) with kCols readable columns in each tile: B itself, or the panel
  std::size_t ldp = ldb;
  alignas(64) float panel[kSmallGemmMax * kPanelCols];  // (K, NP) = op(B), zero padded
  if (trans_b || N % kCols != 0) {
    ldp = round_up_to_tile(N);
    for (std::size_t k = 0; k < K; ++k) {
      float* row = panel + k * ldp;
      if (trans_b)
        for (std::size_t j = 0; j < N; ++j) row[j] = B[j * ldb + k];
      else
        std::memcpy(row, B + k * ldb, N * sizeof(float));
      std::fill(row + N, row + ldp, 0.0f);
    }
    b = panel;
  }
  const std::size_t ra = trans_a ? 1 : lda, ka = trans_a ? lda : 1;  // a_ik = A[i * ra + k * ka]
  for (std::size_t i0 = 0; i0 < M; i0 += kRows) {
    const float* a[kRows];
    for (std::size_t r = 0; r < kRows; ++r) a[r] = A + std::min(i0 + r, M - 1) * ra;  // a tail repeats row M - 1
    for (std::size_t j0 = 0; j0 < N; j0 += kCols)
      tile(a, ka, b + j0, ldp, K, alpha, beta, C + i0 * ldc + j0, ldc, std::min(kRows, M - i0),
           std::min(kCols, N - j0));
  }
}

}  // namespace xgrad::detail
