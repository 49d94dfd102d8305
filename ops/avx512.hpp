// xgrad/ops/avx512.hpp — register helpers shared by the hand-written AVX-512 row kernels
// (ops/attention.cpp's short softmax rows, ops/norm.cpp's layer_norm rows) and their AVX2
// variants, which hold the same 16 lanes as two halves (lanes 0-7, 8-15).
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

}  // namespace xgrad::detail
#endif
