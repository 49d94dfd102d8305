// xgrad/ops/avx512.hpp — register helpers shared by the hand-written AVX-512 row kernels
// (ops/attention.cpp's short softmax rows, ops/norm.cpp's layer_norm rows) and their AVX2
// variants, which hold the same 16 lanes as two halves (lanes 0-7, 8-15); store_first for the
// AVX2 code's partial vectors (those rows, the GEMM tiles' column tails).
//
// Internal: include from op implementation files (.cpp) only; call from functions marked
// XGRAD_TARGET_AVX512 (the __m512 helpers) or either target (the __m256 ones: an AVX2
// function inlines into an AVX-512 one). XGRAD_AVX512_ROWS is defined where these exist
// (x86-64, GCC or clang).
#pragma once
#include "xgrad/ops/isa.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define XGRAD_AVX512_ROWS 1

namespace xgrad::detail {

// Halves of a register (vector shuffles: the intrinsics for these leave GCC 12 warning about
// their undefined pass-through operands).
XGRAD_TARGET_AVX512 inline __m256 low8(__m512 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
XGRAD_TARGET_AVX512 inline __m256 high8(__m512 v) {
  return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
}
XGRAD_TARGET_AVX2 inline __m128 low4(__m256 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3); }
XGRAD_TARGET_AVX2 inline __m128 high4(__m256 v) { return __builtin_shufflevector(v, v, 4, 5, 6, 7); }

// Sum of 16 lanes folded in halves 8, 4, 2, 1: the order of the generic kernels' lane_sum
// (ops/detail.hpp), so a row summed here has the same bits as on the other paths. The lanes
// as two halves (lo: 0-7, hi: 8-15; the first fold is lo + hi) or as one register.
XGRAD_TARGET_AVX2 inline float lane_halves16(__m256 lo, __m256 hi) {
  const __m256 s8 = lo + hi;
  const __m128 s4 = low4(s8) + high4(s8);
  const float s2[2] = {s4[0] + s4[2], s4[1] + s4[3]};
  return s2[0] + s2[1];
}
XGRAD_TARGET_AVX512 inline float lane_halves16(__m512 acc) { return lane_halves16(low8(acc), high8(acc)); }

// Lanes [0, n) of y stored at p[0, n), 0 <= n <= 8, nothing else written: what
// _mm256_maskstore_ps stores with the mask of the first n lanes, in plain stores. On AMD Zen
// the masked store is microcoded: ~4.2 ns a store on a Zen 3, against ~0.5 for a plain one
// (loop of stores, 2026-12-07); the masked load is not (as fast as a plain one there).
XGRAD_TARGET_AVX2 inline void store_first(float* p, __m256 y, std::size_t n) {
  if (n == 8) return _mm256_storeu_ps(p, y);
  __m128 x = low4(y);
  if (n >= 4) _mm_storeu_ps(p, x), x = high4(y), p += 4, n -= 4;
  if (n >= 2) _mm_storel_pi(reinterpret_cast<__m64*>(p), x), x = _mm_movehl_ps(x, x), p += 2, n -= 2;
  if (n == 1) _mm_store_ss(p, x);
}
// The same for float64: lanes [0, n) of y at p[0, n), 0 <= n <= 4.
XGRAD_TARGET_AVX2 inline void store_first(double* p, __m256d y, std::size_t n) {
  if (n == 4) return _mm256_storeu_pd(p, y);
  __m128d x = _mm256_castpd256_pd128(y);
  if (n >= 2) _mm_storeu_pd(p, x), x = _mm256_extractf128_pd(y, 1), p += 2, n -= 2;
  if (n == 1) _mm_store_sd(p, x);
}

}  // namespace xgrad::detail
#endif
