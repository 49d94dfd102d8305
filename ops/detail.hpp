// xgrad/ops/detail.hpp — small helpers shared by op implementations (.cpp files only).
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/registry.hpp"
#include "xgrad/framework/runtime.hpp"

namespace xgrad::detail {

// numpy/PyTorch broadcasting of two shapes; ShapeError naming op and both arguments.
Shape broadcast_shapes(const char* op, const char* arg_a, const Shape& a, const char* arg_b,
                       const Shape& b);

// y[i] = fn(x[i]) for every element, fn called with a T (the float type of x) and returning T,
// into a new tensor of x's shape (DTypeError naming op and argument 'x' unless x is float). One
// loop over raw pointers (an xtensor expression's views cost a small op ~2x its own time).
template <class Fn> Tensor map_float(const char* op, const Tensor& x, Fn fn) {
  check_float(op, "x", x);
  return dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    Tensor y = empty_tensor<T>(x.shape(), op);
    T* py = fresh_data<T>(y);
    for (std::size_t i = 0, n = y.numel(); i < n; ++i) py[i] = T(fn(px[i]));
    return y;
  });
}

// A shape viewed as (outer, n, inner) around one axis: element (o, i, r) sits at
// (o * n + i) * inner + r in row-major order.
struct AxisSplit {
  std::size_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& shape, std::size_t axis);

// Row-major strides of `shape`, with 0 where `shape` is broadcast against `full` (a size-1 dim,
// or a leading dim `shape` lacks: its rank may be lower), one per dim of `full` (used to walk
// a broadcast operand while iterating `full`).
std::vector<std::size_t> broadcast_strides(const Shape& shape, const Shape& full);

// `shape` left-padded with 1s to `rank` dimensions.
Shape pad_left(const Shape& shape, std::size_t rank);

// Row-major strides of a contiguous `shape`.
std::vector<std::size_t> contiguous_strides(const Shape& shape);

// C (M x N, row stride ldc) = alpha op(A) op(B) + beta C on cblas_{s,d}gemm, row-major;
// op(A): M x K with A's row stride lda, op(B): K x N with row stride ldb. Strided operands
// (a head's columns inside a (B, L, H*D) tensor) are passed through lda/ldb/ldc, not copied.
// K == 0 gives C = beta C; beta == 0 never reads C. float32 products with many rows of exact
// zeros in A as stored (a gradient at positions a loss ignores) run without them (ops/detail.cpp,
// "Rows of exact zeros"; inf and NaN in the other operand still propagate).
// OpenBLAS must run single-threaded under xgrad (runtime.hpp): a multi-threaded GEMM cuts the
// product by its thread count, which changes results. Cheap enough to call before every GEMM;
// does nothing with a BLAS that is not OpenBLAS (defined in framework/runtime.cpp).
void blas_single_thread();

// With a row bias (N elements; beta must be 0): C = alpha op(A) op(B) + bias, bias_j added to
// every row, each element the rounded product plus bias_j, as bias copied into C and beta 1
// give (xgrad's own kernels add it in their epilogue; BLAS gets the copy).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
          const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
          const T* bias = nullptr);
// For tests: how many gemm<float> calls on the calling thread have run without A's zero rows.
std::size_t gemm_zero_row_skips() noexcept;

// One float32 matrix's rows of exact zeros, found once for every product that reads it while
// the scope lives on the calling thread: linear's backward reads its upstream gradient G
// (N, out) in dX = G W and dW = G^T X, and scanned it for each. gemm<float>'s zero-row skips
// ask scoped_nonzero_rows; the products are the same bits with or without a scope. The
// innermost scope answers; p null: an inactive scope (float64).
class ZeroRowsScope {
 public:
  ZeroRowsScope(const float* p, std::size_t rows, std::size_t cols) noexcept;
  ~ZeroRowsScope();
  ZeroRowsScope(const ZeroRowsScope&) = delete;
  ZeroRowsScope& operator=(const ZeroRowsScope&) = delete;

 private:
  friend const std::vector<std::size_t>* scoped_nonzero_rows(const float*, std::size_t, std::size_t, std::size_t);
  const float* p_;
  std::size_t rows_, cols_;
  bool scanned_ = false;
  std::vector<std::size_t> kept_;
  ZeroRowsScope* outer_;
};
// The indices of the rows of p (rows x cols, row stride ld) that are not all +-0 when the
// innermost ZeroRowsScope on this thread is that very matrix (contiguous: ld = cols; scanned
// at the first call), else nullptr.
const std::vector<std::size_t>* scoped_nonzero_rows(const float* p, std::size_t rows, std::size_t cols,
                                                    std::size_t ld);

// gemm's result for K = 0, an empty sum: C = beta C (C not read for beta 0), or bias_j in every
// row; M x N of C at row stride ldc. Shared by gemm and the own kernels that take K = 0.
template <class T>
void empty_sum_gemm(std::size_t M, std::size_t N, T beta, T* C, std::size_t ldc, const T* bias) {
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] = bias ? bias[j] : beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

// xgrad's own float64 GEMM (ops/tiled_gemm_f64.cpp), gemm's contract (bias: beta 0), op(A) read
// in place and op(B) packed into column panels first: gemm<double> runs it instead of OpenBLAS
// where own_f64_kernels() is true, i.e. where OpenBLAS runs one of its generic pre-AVX kernel
// families (it does not know the CPU; detail::blas_core_is_generic) and xgrad its AVX2 or
// AVX-512 path. Each element of C is the same bits whatever the shape, the block it falls in,
// the thread count or which of the two paths runs (fused multiply-adds in order of k).
// std::logic_error on the baseline path.
void tiled_gemm_f64(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, double alpha,
                    const double* A, std::size_t lda, const double* B, std::size_t ldb, double beta, double* C,
                    std::size_t ldc, const double* bias = nullptr);
// tiled_gemm_f64 in two steps, so that gemm<double> packs op(B) once for all its blocks:
// pack_f64_bpanels lays op(B) (K, N) (from B (K, N), or B^T (N, K) if trans_b; row stride ldb)
// out as ceil(N / w) panels of w columns, dst[p w K + k w + j % w] = op(B)[k][j] with p = j / w,
// zeros past column N - 1; tiled_gemm_f64_bpanels reads them (a column block from whole panels
// on: Bp + (n0 / w) w K). w must be f64_panel_width(), the path's tile width (AVX-512 16, AVX2
// 8; std::logic_error if it is not).
std::size_t f64_panel_width();
void pack_f64_bpanels(bool trans_b, std::size_t K, std::size_t N, const double* B, std::size_t ldb, double* dst,
                      std::size_t w);
void tiled_gemm_f64_bpanels(bool trans_a, std::size_t M, std::size_t N, std::size_t K, double alpha,
                            const double* A, std::size_t lda, const double* Bp, std::size_t width, double beta,
                            double* C, std::size_t ldc, const double* bias = nullptr);
bool own_f64_kernels();

// gemm<float> with every dimension <= kSmallGemmMax runs small_gemm (ops/tiled_gemm.cpp): the
// same contract, without BLAS's per-call cost, which is most of the time of such a product.
constexpr std::size_t kSmallGemmMax = 32;
inline bool small_gemm_fits(std::size_t M, std::size_t N, std::size_t K) {
  return M <= kSmallGemmMax && N <= kSmallGemmMax && K <= kSmallGemmMax;
}
void small_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc,
                const float* bias = nullptr);

// xgrad's own float32 GEMM, any size (ops/tiled_gemm.cpp; attention's per-head products):
//   C (M, N) = alpha op(A) Bk + beta C      Bk (K, N): op(B) as rows, row k at Bk + k * ldb
// with gemm's conventions otherwise (op(A) M x K, row stride lda; beta 0 never reads C; only
// C's M x N block is written, only Bk's N columns read). Each element of C is the same bits
// as small_gemm's for the same row of op(A) and column of op(B), on the AVX-512 and AVX2
// paths alike. A transposed B (N, K) is first laid out as rows by transpose(N, K, B, ...).
// rows (op(A) not transposed): row i of A and of C is row rows[i] of them (A at rows[i] * lda,
// C at rows[i] * ldc), the others neither read nor written; ks: the k-th k is ks[k] (k < K, in
// A and Bk, each ks[k] < their K). The product of the gathered rows without the gathering.
void tiled_gemm(bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                std::size_t lda, const float* Bk, std::size_t ldb, float beta, float* C, std::size_t ldc,
                const float* bias = nullptr, const std::size_t* rows = nullptr, const std::size_t* ks = nullptr);
// tiled_gemm with op(B) in column panels instead of rows: Bp holds op(B) (K, N) as panels of
// w = width columns, panel p (columns [p w, (p + 1) w)) at Bp + p w K with its row k at + k w, as
// pack_bpanels lays it out; width must be bpanel_width() (std::logic_error if it is not a
// multiple of the tile width). The same bits as tiled_gemm on the same values laid out as rows.
// Read as rows, a column block's K rows lie a row apart: for a long operand (attention's K^T and
// V^T at thousands of keys) every column block starts with K cache misses, and at a row stride
// of a multiple of 1 KiB (N = 256, 512, 1024 floats) the rows share a few L1 sets and evict each
// other; in panels a column block is one contiguous stretch (the score products at 4,096 keys:
// 77 against 89 GFLOP/s; M 256, N 512, K 128 from 1.20x OpenBLAS's time to 0.95x, packing
// included, on a Zen 3). Bias, C and rows as in tiled_gemm.
void tiled_gemm_bpanels(bool trans_a, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                        std::size_t lda, const float* Bp, std::size_t width, float beta, float* C, std::size_t ldc,
                        const float* bias = nullptr, const std::size_t* rows = nullptr);
// The column-panel width of the CPU path in use: its widest tile (AVX-512 32, AVX2 and baseline
// 16). Read it once and pass it to both pack_bpanels and tiled_gemm_bpanels.
std::size_t bpanel_width();
// Elements of op(B) (K, N) packed in column panels of w columns (pack_bpanels,
// pack_f64_bpanels): ceil(N / w) whole panels of w K.
inline std::size_t bpanels_size(std::size_t N, std::size_t K, std::size_t w) { return (N + w - 1) / w * w * K; }
// op(B) (K, N) into column panels of w columns for tiled_gemm_bpanels: from B (K, N) itself
// (trans_b false) or from B^T (N, K) (trans_b true), row stride ldb: dst[p w K + k w + j % w] =
// op(B)[k][j] with p = j / w. Writes only within the first ceil(N / w) w K floats of dst (all of
// them when w divides N); a last partial panel's unused columns are not written
// (tiled_gemm_bpanels never reads them).
// ks (trans_b false only): row k of op(B) is row ks[k] of B (tiled_gemm's k map).
void pack_bpanels(bool trans_b, std::size_t K, std::size_t N, const float* B, std::size_t ldb, float* dst,
                  std::size_t w, const std::size_t* ks = nullptr);
// gemm<float> packs op(B) into column panels (pack_bpanels) for its tiled products of at least
// this many rows (its column blocks, if any, then start on whole panels): there the copy costs
// ~1-5% of the product and saves the L1 conflicts of B's rows (tiled_gemm_bpanels); below it,
// reading B in place is faster (64 x 64 x 192: 0.89x OpenBLAS's time in place, 1.13x packed).
// A B that is not transposed is packed so on the AVX-512 and AVX2 paths, a transposed one on the
// AVX2 path (elsewhere laid out as rows: transpose); not where own_kernels_wider_than_blas routes
// every product (unmeasured there).
constexpr std::size_t kPackBRows = 256;
// gemm<float> of mid size with op(A) not transposed and K <= 128 (or K <= 256 with N < 256)
// runs tiled_gemm (a transposed B packed once per call, then only for M >= 128 rows, where the
// packing is cheap against the product) instead of OpenBLAS, which packs both operands on every
// call: at the reverse model's and the MHA benchmarks' linear shapes 10-35% faster on the
// AVX-512 path, -3% to +7% on the AVX2 one (one call, 1 thread; docs/PERFORMANCE_HISTORY.md,
// eighth round). A transposed A (the weight gradients: read in place, its k-th values lie a row
// of A apart) stays on BLAS, whose packing wins there (on the AVX2 path too, with A packed into
// the tiles' layout: 0.95-1.0x OpenBLAS's speed at the MHA's dW shapes, nineteenth round), but
// with a small C (below).
// On the AVX2 path products of kPackBRows rows or more also run here at any K, op(B) in column
// panels and k in one pass (tiled_gemm.cpp's blocking): 5-10% faster than OpenBLAS (1 thread,
// Zen 3, M 256-1,024, N 256-2,048, K 200-2,048, both B layouts; nineteenth round), as long as
// the packing stays small against the product: N K <= 4,096 M, and <= 2^22 (its copy: <= 16
// MiB). Under 256 rows, op(B) read as rows, OpenBLAS stays 1.04-3.4x faster at K >= 200.
// Where xgrad runs its AVX-512 path while OpenBLAS runs kernels of 256 bits or less
// (own_kernels_wider_than_blas: OPENBLAS_CORETYPE pins Haswell or Zen on an AVX-512 CPU, as the
// environment of the AMD EPYC Zen 5 machines here does, or OpenBLAS does not know the CPU), the
// 8 x 32 tiles are 1.5-1.9x faster than OpenBLAS at every shape of the MHA projections, a
// transposed A read in place included (docs/PERFORMANCE_HISTORY.md, ninth round): every product runs
// here then but a transposed B under 128 rows, and but those whose scratch would be large: N
// over 8,192 columns (the k-chunk sums of a 256-row panel: 256 N floats, <= 8 MiB), or a
// transposed B of over 2^22 elements (its packed copy: <= 16 MiB), such as a vocabulary head.
// On the AVX-512 and AVX2 paths beside OpenBLAS's own kernels, a transposed A with a small C
// (M N <= 16,384, B not transposed: the reverse model's weight gradients, 64-192 x 64-128 over
// 270-540 positions) runs here as well: 1.1-1.3x faster than the Cooperlake and SkylakeX
// kernels, which pack both operands first; from 192 x 192 up they are faster (their time
// 0.76-0.96x the tiles') (Xeon family 6 model 207, 1 thread, interleaved; PERFORMANCE_HISTORY.md,
// twentieth round). On the AVX2 path beside OpenBLAS's Haswell (Zen) kernels the same: the tiles
// 1.09-1.23x faster at 64-128 x 64-128 over 1,024 positions and 192 x 64 over 600, 0.93x at
// 192 x 64 over 1,024; the whole step 0.6-1.9% faster (paired in one process; Xeon model 207
// on its AVX2 path, twenty-third round; not measured on an AMD CPU). With the same routing on
// both paths these products have the same bits on AVX2 and AVX-512 CPUs. On the AVX2 path those
// over K >= 256 run on op(A) and op(B) packed first (tiled_gemm.cpp, packs_transposed_a; on a
// Zen 3 read in place they ran at 47-59 GFLOP/s with a k map, twenty-eighth round): the same bits.
bool own_kernels_wider_than_blas();
inline bool tiled_gemm_fits(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K) {
  if (own_kernels_wider_than_blas())
    return N <= 8192 && (!trans_b || (M >= 128 && N * K <= (std::size_t(1) << 22)));
  if (!trans_a && M >= kPackBRows && N <= 8192 && N * K <= std::min(M << 12, std::size_t(1) << 22) &&
      cpu_path() == CpuPath::Avx2)
    return true;
  if (trans_a && !trans_b && M * N <= 16384 && cpu_path() != CpuPath::Baseline) return true;
  return !trans_a && (K <= 128 || (K <= 256 && N < 256)) && N <= 1024 && (!trans_b || M >= 128) &&
         M * N * K <= (std::size_t(1) << 25);
}
// Whether gemm<float> packs op(B) into column panels for a tiled product (kPackBRows).
inline bool gemm_packs_bpanels(bool trans_b, std::size_t M) {
  return M >= kPackBRows && !own_kernels_wider_than_blas() && (!trans_b || cpu_path() == CpuPath::Avx2);
}
// Row stride of a packed panel with rows of n elements: n rounded up to 16, plus 16, so that
// rows of a power-of-two length (512 floats: 2 KiB) do not all map to the same few L1 sets.
constexpr std::size_t panel_stride(std::size_t n) { return (n + 15) / 16 * 16 + 16; }
// Scratch for packed panels: n uninitialised T from detail::aligned_allocate (64-byte aligned,
// freed blocks cached per thread; not bounded by max_tensor_bytes: no tensor), so that panel
// rows at a stride of whole 16-float blocks start on cache lines and no vector load or store of
// them straddles two (new T[] gave 16-byte alignment: a 16 x 16 transpose into such a panel ran
// at 65 GB/s against 108 GB/s aligned, cache-hot).
struct AlignedFree {
  std::size_t bytes = 0;
  void operator()(void* p) const noexcept { aligned_deallocate(p, bytes); }
};
template <class T> using AlignedBuffer = std::unique_ptr<T[], AlignedFree>;
template <class T> AlignedBuffer<T> aligned_buffer(std::size_t n) {  // n = 0: empty (null)
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);
  if (n == 0) return {};
  const std::size_t bytes = std::max(n * sizeof(T), AlignedAllocator<T>::kAlignFrom);  // its smallest block
  return AlignedBuffer<T>(static_cast<T*>(aligned_allocate(bytes)), AlignedFree{bytes});
}
// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (float32, vectorised).
void transpose(std::size_t rows, std::size_t cols, const float* src, std::size_t lds, float* dst, std::size_t ldd);

// The type a long float32 sum runs in: float64 (a float32 running sum of n terms loses up to
// ~n * 2^-24 relative: 2^24 x 0.1f summed to 1.0099x the exact value), rounded once at the end.
template <class T> using Accumulator = std::conditional_t<std::is_same_v<T, float>, double, T>;

// sum_{i < n} f(i) in kLanes interleaved partial sums: independent adds pipeline (and the
// compiler can vectorise them) where one running sum is a chain of n dependent adds. Element i
// goes into lane i mod kLanes; then the lanes are added pairwise in halves (lane l += lane
// l + kLanes / 2, ..., lanes 0 + 1): log2(kLanes) dependent adds where adding them in order
// was kLanes - 1 (LayerNorm's forward over rows of 64 floats took ~18% longer with the chain).
// Always inlined, so that inside an XGRAD_ISA_KERNEL variant it is compiled for that variant's ISA (there
// kLanes = 64 / sizeof(T) fills one AVX-512 register; 8 lanes of float made GCC shuffle).
template <class T, std::size_t kLanes = 8, class F>
[[gnu::always_inline]] inline T lane_sum(std::size_t n, F&& f) {
  T acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  for (std::size_t j = 0; i < n; ++i, ++j) acc[j] += f(i);
  static_assert(kLanes > 0 && (kLanes & (kLanes - 1)) == 0, "the lanes are added pairwise in halves");
  for (std::size_t half = kLanes / 2; half > 0; half /= 2)
    for (std::size_t j = 0; j < half; ++j) acc[j] += acc[j + half];
  return acc[0];
}

// f(lo, hi) over [0, n) in chunks of 4096 elements, spread over parallel_for's threads
// when n is long enough to pay for it (elementwise loops).
void parallel_chunks(std::size_t n, const std::function<void(std::size_t lo, std::size_t hi)>& f);

// Walks the row-major positions of `shape` one innermost row at a time, for two operands
// with element strides sa and sb (0 along broadcast dims):
//   f(offset_a, offset_b, offset_out, n, step_a, step_b)
// where the row's element i is at offset_a + i * step_a, offset_b + i * step_b and
// offset_out + i (the output is contiguous). Adjacent dims that are contiguous for both
// operands are merged first, so same-shape operands make one long row.
template <class F>
void for_each_row(Shape shape, std::vector<std::size_t> sa, std::vector<std::size_t> sb, F&& f) {
  std::size_t total = 1;
  for (auto d : shape) total *= d;
  if (total == 0) return;
  if (shape.empty()) return f(std::size_t(0), std::size_t(0), std::size_t(0), std::size_t(1),
                              std::size_t(0), std::size_t(0));
  for (std::size_t d = shape.size() - 1; d-- > 0;) {  // merge dim d into d + 1 when contiguous
    if (sa[d] == sa[d + 1] * shape[d + 1] && sb[d] == sb[d + 1] * shape[d + 1]) {
      shape[d + 1] *= shape[d];
      shape.erase(shape.begin() + long(d));
      sa.erase(sa.begin() + long(d));
      sb.erase(sb.begin() + long(d));
    }
  }
  const std::size_t r = shape.size(), n = shape[r - 1], rows = total / n;
  std::vector<std::size_t> idx(r, 0);
  std::size_t oa = 0, ob = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    f(oa, ob, row * n, n, sa[r - 1], sb[r - 1]);
    for (std::size_t d = r - 1; d-- > 0;) {
      oa += sa[d];
      ob += sb[d];
      if (++idx[d] < shape[d]) break;
      oa -= sa[d] * shape[d];
      ob -= sb[d] * shape[d];
      idx[d] = 0;
    }
  }
}

}  // namespace xgrad::detail
