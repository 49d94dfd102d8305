// Small float32 GEMMs without BLAS's per-call cost (declared in ops/detail.hpp).
//
// A 16x16x16 product is 4,096 multiply-adds: 256 AVX-512 or 512 AVX2 FMAs. OpenBLAS spends
// ~3,000 instructions per call around them (argument checks, buffer set-up, packing both
// operands into its panels), and the reverse model's training step makes 3,072 such calls
// (its attention heads: T = S = D = 16). With every dimension <= kSmallGemmMax the product
// runs here instead.
//
//   C (M, N) = alpha op(A) op(B) + beta C          op(A) (M, K), op(B) (K, N)
//   panel (K, NP) = op(B), NP = N rounded up to kCols, zero columns after N
//   for each tile of kRows rows i and kCols columns j (micro-kernel tile_*):
//     acc_ij = sum_{k = 0 .. K-1} a_ik b_kj        in order of k, one multiply-add per k
//     C_ij   = alpha acc_ij (+ beta C_ij if beta != 0; C is never read for beta 0)
//
// Every element of C is the same function of its row of op(A) and its column of op(B),
// whatever M, N, the tile it falls in or the thread count. The AVX-512 and AVX2 micro-kernels
// fuse each multiply-add (one rounding, the same bits on both paths); the baseline one rounds
// the product and then the sum.
#include <algorithm>
#include <cstddef>
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
constexpr std::size_t kPanelCols = (kSmallGemmMax + kCols - 1) / kCols * kCols;

// out (kRows, kCols) = sum_k a[r][k * ka] * b[k * NP + l]; b 64-byte aligned, NP % kCols == 0.
using Tile = void (*)(const float* const* a, std::size_t ka, const float* b, std::size_t NP, std::size_t K,
                      float* out);

void tile_baseline(const float* const* a, std::size_t ka, const float* b, std::size_t NP, std::size_t K,
                   float* out) {
  float acc[kRows][kCols] = {};
  for (std::size_t k = 0; k < K; ++k, b += NP)
    for (std::size_t r = 0; r < kRows; ++r) {
      const float x = a[r][k * ka];
      for (std::size_t l = 0; l < kCols; ++l) acc[r][l] += x * b[l];
    }
  std::memcpy(out, acc, sizeof acc);
}

#ifdef XGRAD_SMALL_GEMM_X86
XGRAD_TARGET_AVX512 void tile_avx512(const float* const* a, std::size_t ka, const float* b, std::size_t NP,
                                     std::size_t K, float* out) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  for (std::size_t k = 0, at = 0; k < K; ++k, at += ka, b += NP) {
    const __m512 bk = _mm512_load_ps(b);
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(a0[at]), bk, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(a1[at]), bk, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(a2[at]), bk, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(a3[at]), bk, c3);
  }
  _mm512_storeu_ps(out, c0);
  _mm512_storeu_ps(out + kCols, c1);
  _mm512_storeu_ps(out + 2 * kCols, c2);
  _mm512_storeu_ps(out + 3 * kCols, c3);
}

XGRAD_TARGET_AVX2 void tile_avx2(const float* const* a, std::size_t ka, const float* b, std::size_t NP,
                                 std::size_t K, float* out) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  for (std::size_t k = 0, at = 0; k < K; ++k, at += ka, b += NP) {
    const __m256 lo = _mm256_load_ps(b), hi = _mm256_load_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a0 + at);
    c0 = _mm256_fmadd_ps(x, lo, c0), c1 = _mm256_fmadd_ps(x, hi, c1);
    x = _mm256_broadcast_ss(a1 + at);
    c2 = _mm256_fmadd_ps(x, lo, c2), c3 = _mm256_fmadd_ps(x, hi, c3);
    x = _mm256_broadcast_ss(a2 + at);
    c4 = _mm256_fmadd_ps(x, lo, c4), c5 = _mm256_fmadd_ps(x, hi, c5);
    x = _mm256_broadcast_ss(a3 + at);
    c6 = _mm256_fmadd_ps(x, lo, c6), c7 = _mm256_fmadd_ps(x, hi, c7);
  }
  const __m256 c[] = {c0, c1, c2, c3, c4, c5, c6, c7};
  for (std::size_t i = 0; i < 8; ++i) _mm256_storeu_ps(out + 8 * i, c[i]);
}
#endif

Tile pick_tile() {
#ifdef XGRAD_SMALL_GEMM_X86
  switch (cpu_path()) {
    case CpuPath::Avx512: return tile_avx512;
    case CpuPath::Avx2: return tile_avx2;
    default: break;
  }
#endif
  return tile_baseline;
}

}  // namespace

bool small_gemm_fits(std::size_t M, std::size_t N, std::size_t K) {
  return M <= kSmallGemmMax && N <= kSmallGemmMax && K <= kSmallGemmMax;
}

void small_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
  const Tile tile = pick_tile();
  const std::size_t NP = (N + kCols - 1) / kCols * kCols;
  alignas(64) float panel[kSmallGemmMax * kPanelCols];  // (K, NP) = op(B), zero padded
  for (std::size_t k = 0; k < K; ++k) {
    float* row = panel + k * NP;
    if (trans_b)
      for (std::size_t j = 0; j < N; ++j) row[j] = B[j * ldb + k];
    else
      std::memcpy(row, B + k * ldb, N * sizeof(float));
    std::fill(row + N, row + NP, 0.0f);
  }
  const std::size_t ra = trans_a ? 1 : lda, ka = trans_a ? lda : 1;  // a_ik = A[i * ra + k * ka]
  for (std::size_t i0 = 0; i0 < M; i0 += kRows) {
    const std::size_t rows = std::min(kRows, M - i0);
    const float* a[kRows];
    for (std::size_t r = 0; r < kRows; ++r) a[r] = A + std::min(i0 + r, M - 1) * ra;  // a tail repeats row M - 1
    for (std::size_t j0 = 0; j0 < NP; j0 += kCols) {
      float acc[kRows * kCols];
      tile(a, ka, panel + j0, NP, K, acc);
      const std::size_t cols = std::min(kCols, N - j0);
      for (std::size_t r = 0; r < rows; ++r) {
        const float* v = acc + r * kCols;
        float* c = C + (i0 + r) * ldc + j0;
        if (beta == 0.0f)
          for (std::size_t l = 0; l < cols; ++l) c[l] = alpha * v[l];
        else
          for (std::size_t l = 0; l < cols; ++l) c[l] = alpha * v[l] + beta * c[l];
      }
    }
  }
}

}  // namespace xgrad::detail
