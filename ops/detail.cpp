// Helpers shared by op implementations.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/framework/parallel.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/isa.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define XGRAD_GEMM_X86 1
#endif

namespace xgrad::detail {

// OpenBLAS's kernel family is fixed at load (its CPU detection, or OPENBLAS_CORETYPE); xgrad's
// CPU path may change (set_cpu_path), so only the former is cached. Another BLAS ("not
// OpenBLAS"): its kernels are unknown, so it keeps its products.
bool own_kernels_wider_than_blas() {
  static const bool blas_narrower = [] {
    const std::string core = runtime_info().blas_core;
    for (const char* keep : {"SkylakeX", "Cooperlake", "SapphireRapids", "not OpenBLAS"})
      if (core == keep) return false;
    return true;
  }();
  return blas_narrower && cpu_path() == CpuPath::Avx512;
}

namespace {
template <class T>
void gemm_one_call(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                   const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  const auto TA = trans_a ? CblasTrans : CblasNoTrans, TB = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, TA, TB, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta,
                C, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, TA, TB, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta,
                C, int(ldc));
}

// How a GEMM is cut into blocks: from its shape alone wherever the cut could change bits, so
// that every bit of C is the same for any number of threads. OpenBLAS's results for a row (or
// column) of C can depend on where it falls in the product it is computed in (its Haswell and
// Zen sgemm kernels differ in ~8% of elements between one 1024-row product and two 512-row
// halves). Blocks are >= kMinBlock long and >= kMinBlockWork multiply-adds (each one re-packs
// the other operand and pays a call: 3-6% of one-call speed at 4 blocks of 512, 12% for a
// weight gradient on SkylakeX, measured in docs/PERFORMANCE_HISTORY.md), and at most
// kMaxBlocks. Where OpenBLAS's cut cannot change a bit (blas_sgemm_cut_invariant) there are
// also at most num_threads() blocks: one call on one thread. (xgrad's own kernels never depend
// on the cut, and pack op(B) once for all blocks.)
constexpr std::size_t kMinBlockWork = std::size_t(1) << 23;  // ~60 us on one core
constexpr std::size_t kMinBlock = 256;
constexpr std::size_t kMaxBlocks = 4;
constexpr std::size_t kBlockAlign = 16;  // block lengths: multiples of the kernels' unrolling

// Whether OpenBLAS's sgemm gives every element of C the same bits however the product is cut
// into blocks as below: measured on its SkylakeX and Cooperlake kernels (0 of 1,800 products of
// 16-2,600 x 16-2,600 x 1-2,600 cut into 2-4 blocks whenever the rule below makes blocks of
// them, each cut against one call: every transpose, beta 0 and 1, alpha 1 and -0.37, padded
// leading dimensions, OPENBLAS_L2_SIZE 256 KiB to 2 MiB or unset; docs/PERFORMANCE_HISTORY.md,
// thirty-third round). Its small-matrix kernels, which it runs on products of up to ~2^20
// multiply-adds, give other bits; blocks here are never that small. Its Haswell and Zen
// kernels differ between cuts (27 of 30 products), and so does its dgemm on SkylakeX (~1 in 3);
// other families and BLASes are not measured. test_parallel's
// split_gemms_are_bit_identical_for_any_thread_count fails where this is wrong.
bool blas_sgemm_cut_invariant() {
  static const bool invariant = [] {
    const std::string core = runtime_info().blas_core;
    return core == "SkylakeX" || core == "Cooperlake";
  }();
  return invariant;
}

// Whether gemm_all_rows<float> runs an M x N x K product on tiled_gemm such that it takes a
// row map (op(A) not transposed; op(B) as rows or in panels) or a k map (op(A) transposed, op(B)
// not, as rows): its routing below.
bool tiled_takes_map(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K) {
  if (small_gemm_fits(M, N, K) || !tiled_gemm_fits(trans_a, trans_b, M, N, K)) return false;
  return !trans_a || (!trans_b && !gemm_packs_bpanels(trans_b, M));
}

// gemm, every row of A as it comes; or, float32 on tiled_gemm (tiled_takes_map; see
// gemm_skipping_zero_rows), with a row map (rows, op(A) not transposed: row i of A and C is row
// rows[i]) or a k map (ks: the k-th k of A and B is ks[k]).
template <class T>
void gemm_all_rows(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                   const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
                   const T* bias, const std::size_t* rows = nullptr, const std::size_t* ks = nullptr) {
  if (M == 0 || N == 0) return;
  if (K == 0) return empty_sum_gemm(M, N, beta, C, ldc, bias);
  blas_single_thread();  // also before the small path: any xgrad GEMM leaves OpenBLAS single-threaded (documented)
  if constexpr (std::is_same_v<T, float>)
    if (small_gemm_fits(M, N, K) && !rows && !ks)
      return small_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  // Mid-sized float32 products run xgrad's own micro-kernels (tiled_gemm), op(B) as rows: B
  // itself, or B^T packed once here; or, kPackBRows rows or more (gemm_packs_bpanels), op(B)
  // packed once into column panels (tiled_gemm_bpanels). Their results do not depend on the
  // blocks below, nor on how op(B) is laid out.
  const T* Bk = B;
  std::size_t ldk = ldb;
  bool tiled = false, bpanels = false;
  std::size_t width = 0;  // bpanels, own_f64: the panel width
  AlignedBuffer<T> panel;
  if constexpr (std::is_same_v<T, float>)
    if (tiled_gemm_fits(trans_a, trans_b, M, N, K)) {
      tiled = true;
      if (gemm_packs_bpanels(trans_b, M)) {
        bpanels = true;
        width = bpanel_width();
        panel = aligned_buffer<T>(bpanels_size(N, K, width));
        pack_bpanels(trans_b, K, N, B, ldb, panel.get(), width);
        Bk = panel.get();
      } else if (trans_b) {
        ldk = panel_stride(N);
        panel = aligned_buffer<T>(K * ldk);
        transpose(N, K, B, ldb, panel.get(), ldk);
        Bk = panel.get();
      }
    }
  // float64 where OpenBLAS runs generic kernels: xgrad's tiles, op(B) packed once here too.
  bool own_f64 = false;
  if constexpr (std::is_same_v<T, double>)
    if (own_f64_kernels()) {
      own_f64 = true;
      width = f64_panel_width();
      panel = aligned_buffer<T>(bpanels_size(N, K, width));
      pack_f64_bpanels(trans_b, K, N, B, ldb, panel.get(), width);
      Bk = panel.get();
    }
  // A block's rows of C, columns [n0, n0 + n): BLAS gets bias copied into them and beta 1.
  // (bpanels: bk = the block's first panel; column blocks start on whole panels.)
  if ((rows && (!tiled || trans_a)) || (ks && (!tiled || bpanels || trans_b)))
    throw std::logic_error("gemm: a row or k map without tiled_gemm on op(B) as rows");
  // map: the block's row map (rows + its first row; then a and c are A and C's first column)
  const auto one = [&](std::size_t m, std::size_t n, const T* a, const T* b, const T* bk, T* c, std::size_t n0,
                       const std::size_t* map) {
    if constexpr (std::is_same_v<T, float>) {
      const float* bn = bias ? bias + n0 : nullptr;
      if (bpanels) return tiled_gemm_bpanels(trans_a, m, n, K, alpha, a, lda, bk, width, beta, c, ldc, bn, map);
      if (tiled) return tiled_gemm(trans_a, m, n, K, alpha, a, lda, bk, ldk, beta, c, ldc, bn, map, ks);
    } else if (own_f64) {
      return tiled_gemm_f64_bpanels(trans_a, m, n, K, alpha, a, lda, bk, width, beta, c, ldc,
                                    bias ? bias + n0 : nullptr);
    }
    if (bias)
      for (std::size_t i = 0; i < m; ++i) std::copy_n(bias + n0, n, c + i * ldc);
    gemm_one_call(trans_a, trans_b, m, n, K, alpha, a, lda, b, ldb, bias ? T(1) : beta, c, ldc);
  };
  // Rows [m0, m1) of C need rows [m0, m1) of op(A) only; columns [n0, n1), columns of op(B) only.
  const bool by_rows = M >= N;
  const std::size_t len = by_rows ? M : N;
  std::size_t blocks = std::clamp<std::size_t>(std::min(len / kMinBlock, M * N * K / kMinBlockWork), 1, kMaxBlocks);
  if (std::is_same_v<T, float> && blocks > 1 && !tiled && blas_sgemm_cut_invariant())
    blocks = std::min(blocks, std::size_t(std::max(1, num_threads())));
  if (blocks == 1) return one(M, N, A, B, Bk, C, 0, rows);
  const std::size_t align = (bpanels || own_f64) && !by_rows ? width : kBlockAlign;  // width: 8, 16 or 32
  // ceil(len / blocks) rounded up to align: at most `blocks` blocks (len / blocks rounded down
  // and then up could leave a last block of a few rows, e.g. 256 + 256 + 256 + 1 of 769)
  const std::size_t step = ((len + blocks - 1) / blocks + align - 1) / align * align;
  const std::size_t count = (len + step - 1) / step;
  parallel_for(count, step * (by_rows ? N : M) * K, [&](std::size_t begin, std::size_t end) {
    for (std::size_t blk = begin; blk < end; ++blk) {
      const std::size_t lo = blk * step, n = std::min(len, lo + step) - lo;
      if (rows && by_rows)
        one(n, N, A, B, Bk, C, 0, rows + lo);
      else if (by_rows)
        one(n, N, trans_a ? A + lo : A + lo * lda, B, Bk, C + lo * ldc, 0, nullptr);
      else
        one(M, n, A, trans_b ? B + lo * ldb : B + lo, bpanels || own_f64 ? Bk + lo * K : Bk + lo, C + lo, lo, rows);
    }
  });
}

// --- Rows of exact zeros ---------------------------------------------------------------------
// A loss that ignores positions (cross_entropy's ignore_index, padding) gives gradients whose
// rows there are exact zeros, and so does every gradient propagated back from them
// row by row: in dX = dY W (A = dY) such a row of A gives a row of C that is alpha * 0, and in
// dW = dY^T X (sum_outer: A = dY transposed) such a row of the stored A adds an exact +-0 to
// every sum. float32 products of kSkipMinWork multiply-adds or more, at least 1/kSkipFraction
// of whose rows are zero, run the other rows only (on tiled_gemm read and written in place
// through a row or k map; for small_gemm and BLAS gathered into scratch), provided every
// value of the other operand that the zero rows would have met is finite: 0 * inf and 0 * NaN
// are NaN, so with an inf or NaN there the whole product runs and they propagate as in it.
// Results: where the full and the reduced product both run xgrad's kernels (small_gemm,
// tiled_gemm_fits; each element the same fused chain over k, whatever the other rows), a kept
// row of C is the full product's bit for bit, a skipped one its alpha * 0, and a sum without
// its +-0 terms differs from the full one at most in the sign of a zero result (-0 from an
// underflow that a +0 term would have made +0); where either runs OpenBLAS (large products), a
// row's last bits depend on where it falls in the product and the k blocking on K, so they may
// differ from the full product's within float32 rounding, and a skipped row is alpha * 0 where
// OpenBLAS may give +0 for a negative alpha. Either way they depend on the data only, never on
// the thread count.
constexpr std::size_t kSkipMinWork = std::size_t(1) << 18, kSkipFraction = 8;

// Row scans, on the floats' bits: +-0 is 0 without the sign bit, inf and NaN have every
// exponent bit set. 16 (AVX-512) or 8 (AVX2) floats a compare; a row stops at the first block
// of four compares with a hit.
constexpr std::uint32_t kMagnitude = 0x7fffffffu, kExponent = 0x7f800000u;
std::uint64_t bits2(const float* p) {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
inline bool zero_row_baseline(const float* p, std::size_t n) {
  std::size_t j = 0;
  for (; j + 2 <= n; j += 2)
    if (bits2(p + j) & 0x7fffffff7fffffffull) return false;
  return j == n || !(fastmath::impl::bits(p[j]) & kMagnitude);
}
bool finite_row_baseline(const float* p, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j)
    if ((fastmath::impl::bits(p[j]) & kExponent) == kExponent) return false;
  return true;
}
#ifdef XGRAD_GEMM_X86
// The vector variants test four vectors at a time (their OR: one test and one branch per four
// loads, which then overlap; the zero scans one at a time ran at ~20 GB/s in the reverse
// model's dense step, which this takes 0.4% (AVX2 path) to 1% (AVX-512) faster, paired), then
// one at a time, then the tail.
XGRAD_TARGET_AVX512 inline bool zero_row_avx512(const float* p, std::size_t n) {
  const __m512i mag = _mm512_set1_epi32(int(kMagnitude));
  std::size_t j = 0;
  for (; j + 64 <= n; j += 64) {
    const __m512i v = _mm512_or_si512(_mm512_or_si512(_mm512_loadu_si512(p + j), _mm512_loadu_si512(p + j + 16)),
                                      _mm512_or_si512(_mm512_loadu_si512(p + j + 32), _mm512_loadu_si512(p + j + 48)));
    if (_mm512_test_epi32_mask(v, mag)) return false;
  }
  for (; j + 16 <= n; j += 16)
    if (_mm512_test_epi32_mask(_mm512_loadu_si512(p + j), mag)) return false;
  const __mmask16 t = __mmask16((1u << (n - j)) - 1);
  return !_mm512_mask_test_epi32_mask(t, _mm512_maskz_loadu_epi32(t, p + j), mag);
}
XGRAD_TARGET_AVX512 inline __mmask16 exponent_hits_avx512(const float* p, __m512i e) {
  return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(p), e), e);
}
XGRAD_TARGET_AVX512 bool finite_row_avx512(const float* p, std::size_t n) {
  const __m512i e = _mm512_set1_epi32(int(kExponent));
  std::size_t j = 0;
  for (; j + 64 <= n; j += 64)
    if (exponent_hits_avx512(p + j, e) | exponent_hits_avx512(p + j + 16, e) | exponent_hits_avx512(p + j + 32, e) |
        exponent_hits_avx512(p + j + 48, e))
      return false;
  for (; j + 16 <= n; j += 16)
    if (exponent_hits_avx512(p + j, e)) return false;
  const __mmask16 t = __mmask16((1u << (n - j)) - 1);
  return !_mm512_mask_cmpeq_epi32_mask(t, _mm512_and_si512(_mm512_maskz_loadu_epi32(t, p + j), e), e);
}
XGRAD_TARGET_AVX2 inline __m256i load8i(const float* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
XGRAD_TARGET_AVX2 inline bool zero_row_avx2(const float* p, std::size_t n) {
  const __m256i mag = _mm256_set1_epi32(int(kMagnitude));
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m256i v = _mm256_or_si256(_mm256_or_si256(load8i(p + j), load8i(p + j + 8)),
                                      _mm256_or_si256(load8i(p + j + 16), load8i(p + j + 24)));
    if (!_mm256_testz_si256(v, mag)) return false;
  }
  for (; j + 8 <= n; j += 8)
    if (!_mm256_testz_si256(load8i(p + j), mag)) return false;
  return zero_row_baseline(p + j, n - j);
}
XGRAD_TARGET_AVX2 inline __m256i exponent_hits_avx2(const float* p, __m256i e) {
  return _mm256_cmpeq_epi32(_mm256_and_si256(load8i(p), e), e);
}
XGRAD_TARGET_AVX2 bool finite_row_avx2(const float* p, std::size_t n) {
  const __m256i e = _mm256_set1_epi32(int(kExponent));
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32)
    if (_mm256_movemask_epi8(_mm256_or_si256(_mm256_or_si256(exponent_hits_avx2(p + j, e), exponent_hits_avx2(p + j + 8, e)),
                                             _mm256_or_si256(exponent_hits_avx2(p + j + 16, e), exponent_hits_avx2(p + j + 24, e)))))
      return false;
  for (; j + 8 <= n; j += 8)
    if (_mm256_movemask_epi8(exponent_hits_avx2(p + j, e))) return false;
  return finite_row_baseline(p + j, n - j);
}
#endif
// The indices of the rows of R x n (row stride ld) that are not all zero into kept; how many.
#define XGRAD_NONZERO_ROWS(path, target)                                                                 \
  target std::size_t nonzero_rows_##path(const float* p, std::size_t R, std::size_t n, std::size_t ld, \
                                         std::size_t* kept) {                                           \
    std::size_t m = 0;                                                                                  \
    for (std::size_t r = 0; r < R; ++r)                                                                 \
      if (!zero_row_##path(p + r * ld, n)) kept[m++] = r;                                               \
    return m;                                                                                           \
  }
XGRAD_NONZERO_ROWS(baseline, )
#ifdef XGRAD_GEMM_X86
XGRAD_NONZERO_ROWS(avx2, XGRAD_TARGET_AVX2)
XGRAD_NONZERO_ROWS(avx512, XGRAD_TARGET_AVX512)
#endif
#undef XGRAD_NONZERO_ROWS
using RowTest = bool (*)(const float*, std::size_t);
// kept = the indices of the rows of R x n (row stride ld) that are not all zero.
void scan_nonzero_rows(const float* p, std::size_t R, std::size_t n, std::size_t ld, std::vector<std::size_t>& kept) {
  kept.resize(R);
  kept.resize(XGRAD_ISA_SELECT(nonzero_rows)(p, R, n, ld, kept.data()));
}
// Those indices: a ZeroRowsScope's when one covers p, else scanned into `local`; nullptr when
// fewer than R / kSkipFraction rows are zero: nothing worth skipping.
const std::vector<std::size_t>* nonzero_rows(const float* p, std::size_t R, std::size_t n, std::size_t ld,
                                             std::vector<std::size_t>& local) {
  const std::vector<std::size_t>* kept = scoped_nonzero_rows(p, R, n, ld);
  if (!kept) scan_nonzero_rows(p, R, n, ld, local), kept = &local;
  const std::size_t zeros = R - kept->size();
  return zeros != 0 && zeros * kSkipFraction >= R ? kept : nullptr;
}
void gather_rows(const float* p, std::size_t ld, const std::vector<std::size_t>& rows, std::size_t n, float* dst) {
  for (std::size_t i = 0; i < rows.size(); ++i) std::copy_n(p + rows[i] * ld, n, dst + i * n);
}

thread_local std::size_t t_zero_row_skips = 0;  // gemm_zero_row_skips()

// gemm<float> without A's zero rows, when it pays (see above); false: run the whole product.
bool gemm_skipping_zero_rows(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                             const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C,
                             std::size_t ldc, const float* bias) {
  if (M * N * K < kSkipMinWork) return false;
  const RowTest finite_row = XGRAD_ISA_SELECT(finite_row);
  if (!trans_a) {  // rows of op(A) = rows of C; C's other rows: alpha * 0 (beta 0, no bias only)
    if (beta != 0.0f || bias) return false;
    std::vector<std::size_t> scanned;
    const std::vector<std::size_t>* const kept_rows = nonzero_rows(A, M, K, lda, scanned);
    if (!kept_rows) return false;
    const std::vector<std::size_t>& kept = *kept_rows;
    for (std::size_t r = 0; r < (trans_b ? N : K); ++r)  // op(B) meets every zero row whole
      if (!finite_row(B + r * ldb, trans_b ? K : N)) return false;
    const std::size_t m = kept.size();
    if (m && tiled_takes_map(false, trans_b, m, N, K)) {  // the kept rows in place
      gemm_all_rows<float>(false, trans_b, m, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, nullptr, kept.data());
    } else if (m) {  // else gathered (small_gemm, BLAS)
      auto a = aligned_buffer<float>(m * K), c = aligned_buffer<float>(m * N);
      gather_rows(A, lda, kept, K, a.get());
      gemm_all_rows<float>(false, trans_b, m, N, K, alpha, a.get(), K, B, ldb, 0.0f, c.get(), N, nullptr);
      for (std::size_t i = 0; i < m; ++i) std::memcpy(C + kept[i] * ldc, c.get() + i * N, N * sizeof(float));
    }
    const float zero = alpha * 0.0f;  // -0 for a negative alpha
    for (std::size_t i = 0, next = 0; i < M; ++i) {  // the skipped rows
      float* ci = C + i * ldc;
      if (next < m && kept[next] == i) ++next;
      else if (zero == 0.0f && !std::signbit(zero)) std::memset(ci, 0, N * sizeof(float));  // glibc's, wider
      else std::fill_n(ci, N, zero);
    }
    ++t_zero_row_skips;
    return true;
  }
  if (trans_b) return false;
  // op(A) = A^T: row k of the stored A (M values) meets row k of B (N values) only
  std::vector<std::size_t> scanned;
  const std::vector<std::size_t>* const kept_ks = nonzero_rows(A, K, M, lda, scanned);
  if (!kept_ks || kept_ks->empty()) return false;  // all zero: the full product's alpha * 0
  const std::vector<std::size_t>& kept = *kept_ks;
  for (std::size_t k = 0, next = 0; k < K; ++k) {
    if (next < kept.size() && kept[next] == k) ++next;
    else if (!finite_row(B + k * ldb, N)) return false;
  }
  const std::size_t k2 = kept.size();
  if (tiled_takes_map(true, false, M, N, k2)) {  // the kept k in place
    gemm_all_rows<float>(true, false, M, N, k2, alpha, A, lda, B, ldb, beta, C, ldc, bias, nullptr, kept.data());
  } else {  // else gathered (small_gemm, BLAS)
    auto a = aligned_buffer<float>(k2 * M), b = aligned_buffer<float>(k2 * N);
    gather_rows(A, lda, kept, M, a.get());
    gather_rows(B, ldb, kept, N, b.get());
    gemm_all_rows<float>(true, false, M, N, k2, alpha, a.get(), M, b.get(), N, beta, C, ldc, bias);
  }
  ++t_zero_row_skips;
  return true;
}
}  // namespace

std::size_t gemm_zero_row_skips() noexcept { return t_zero_row_skips; }

namespace {
thread_local ZeroRowsScope* t_zero_rows_scope = nullptr;  // the innermost on this thread
}
ZeroRowsScope::ZeroRowsScope(const float* p, std::size_t rows, std::size_t cols) noexcept
    : p_(p), rows_(rows), cols_(cols), outer_(t_zero_rows_scope) {
  t_zero_rows_scope = this;
}
ZeroRowsScope::~ZeroRowsScope() { t_zero_rows_scope = outer_; }
const std::vector<std::size_t>* scoped_nonzero_rows(const float* p, std::size_t rows, std::size_t cols,
                                                    std::size_t ld) {
  ZeroRowsScope* const s = t_zero_rows_scope;
  if (!s || !p || s->p_ != p || s->rows_ != rows || s->cols_ != cols || ld != cols) return nullptr;
  if (!s->scanned_) scan_nonzero_rows(p, rows, cols, ld, s->kept_), s->scanned_ = true;
  return &s->kept_;
}

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
          const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
          const T* bias) {
  if constexpr (std::is_same_v<T, float>)
    if (M && N && K && !small_gemm_fits(M, N, K) &&
        gemm_skipping_zero_rows(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias))
      return;
  gemm_all_rows<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

template void gemm<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*,
                          std::size_t, const float*, std::size_t, float, float*, std::size_t, const float*);
template void gemm<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*,
                           std::size_t, const double*, std::size_t, double, double*, std::size_t, const double*);

void parallel_chunks(std::size_t n, const std::function<void(std::size_t, std::size_t)>& f) {
  constexpr std::size_t kChunk = 4096;
  parallel_for((n + kChunk - 1) / kChunk, kChunk * kElementCost, [&](std::size_t begin, std::size_t end) {
    f(begin * kChunk, std::min(n, end * kChunk));
  });
}

Shape broadcast_shapes(const char* op, const char* arg_a, const Shape& a, const char* arg_b,
                       const Shape& b) {
  std::size_t r = std::max(a.size(), b.size());
  Shape pa = pad_left(a, r), pb = pad_left(b, r), out(r);
  for (std::size_t d = 0; d < r; ++d) {
    if (pa[d] == pb[d] || pb[d] == 1) out[d] = pa[d];
    else if (pa[d] == 1) out[d] = pb[d];
    else
      throw_error<ShapeError>(op, "argument '", arg_a, "' ", a, " and argument '", arg_b, "' ", b,
                              " cannot be broadcast together (dimension ", d, ")");
  }
  return out;
}

AxisSplit split_at(const Shape& shape, std::size_t axis) {
  AxisSplit s;
  for (std::size_t d = 0; d < axis; ++d) s.outer *= shape[d];
  s.n = shape[axis];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

std::vector<std::size_t> broadcast_strides(const Shape& shape, const Shape& full) {
  const std::size_t lead = full.size() - shape.size();  // shape's missing leading dims: stride 0
  std::vector<std::size_t> st(full.size(), 0);
  std::size_t s = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    st[lead + d] = (shape[d] == 1 && full[lead + d] != 1) ? 0 : s;
    s *= shape[d];
  }
  return st;
}

std::vector<std::size_t> contiguous_strides(const Shape& shape) {
  std::vector<std::size_t> st(shape.size());
  std::size_t s = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    st[d] = s;
    s *= shape[d];
  }
  return st;
}

Shape pad_left(const Shape& shape, std::size_t rank) {
  Shape p(rank - std::min(rank, shape.size()), 1);
  p.insert(p.end(), shape.begin(), shape.end());
  return p;
}

}  // namespace xgrad::detail
