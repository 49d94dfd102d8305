// bench_matmul: xgrad::matmul / xgrad::linear against raw cblas_sgemm on float32 square
// matrices, n = 64, 256, 1024.
//
// Both sides run on the same OpenBLAS with the same thread count: 1 by default, or
// XGRAD_THREADS=<n> (xgrad splits large GEMMs over its own threads; the raw cblas_sgemm
// cases give OpenBLAS n threads, see bench_common.hpp). Times are wall-clock (UseRealTime), so multi-threaded GEMMs
// are measured correctly. Counter GFLOP/s counts 2 n^3 flops per GEMM:
//   forward: 1 GEMM; forward+backward (dA = G B^T, dB = A^T G): 3 GEMMs.
// The cblas_* cases are the floor: same GEMMs into preallocated outputs, no graph, no
// allocation.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include "xgrad/ops/detail.hpp"
#include "xgrad/xgrad.hpp"

namespace {

void set_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

double gemm_flops(std::size_t n) { return 2.0 * double(n) * double(n) * double(n); }

xgrad::Tensor random_tensor(const xgrad::Shape& shape, unsigned seed) {
  xgrad::Rng rng(seed);
  return xgrad::randn(shape, rng, xgrad::DType::Float32);
}

// --- forward: one GEMM ---------------------------------------------------------------
void BM_xgrad_matmul(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  xgrad::Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2);
  for (auto _ : state) {
    xgrad::Tensor c = xgrad::matmul(a, b);
    benchmark::DoNotOptimize(c.data<float>());
    benchmark::ClobberMemory();
  }
  set_flops(state, gemm_flops(n));
}

// The raw floor: C (n x n) = A B with cblas_sgemm on OpenBLAS with `threads` threads, into a
// preallocated C, timed per call.
void time_raw_sgemm(benchmark::State& state, int n, const float* a, const float* b, float* c, int threads) {
  RawBlasThreads blas(threads);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    benchmark::DoNotOptimize(c);
    benchmark::ClobberMemory();
  }
  set_flops(state, gemm_flops(std::size_t(n)));
}

void BM_cblas_sgemm(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  FloatVector a = random_vector(n * n, 1), b = random_vector(n * n, 2), c(n * n);
  time_raw_sgemm(state, int(n), a.data(), b.data(), c.data(), xgrad::num_threads());
}

// Raw 64 x 64 cblas_sgemm with A and B starting `offset` bytes past a 64-byte boundary (C
// aligned): why xgrad's storage and the reference buffers above are 64-byte aligned.
void BM_cblas_sgemm_offset(benchmark::State& state) {
  const int n = 64;
  const auto offset = std::size_t(state.range(0));
  FloatVector a = random_vector(n * n + 16, 1), b = random_vector(n * n + 16, 2), c(n * n);
  const float* pa = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.data()) + offset);
  const float* pb = reinterpret_cast<const float*>(reinterpret_cast<const char*>(b.data()) + offset);
  time_raw_sgemm(state, n, pa, pb, c.data(), 1);
}

// Raw 64 x 64 cblas_sgemm writing C at `offset` bytes past a 4 KiB boundary, A and B at 4 KiB
// boundaries: where the output lands decides how often its stores and the kernel's loads of A
// and B share address bits 0-11 (4K aliasing) or cache sets, and moves the time by up to
// ~15% on this machine. A fresh output tensor lands wherever malloc puts it, so comparing
// matmul with a fixed preallocated C compares placements as much as overhead: see
// BM_matmul_vs_cblas_same_buffers.
void BM_cblas_sgemm_c_offset(benchmark::State& state) {
  const int n = 64;
  const auto offset = std::size_t(state.range(0));
  const std::size_t page = 4096 / sizeof(float), step = n * n + page;  // floats; step: 20 KiB
  FloatVector pool(3 * step + page);  // A, B, C at `step` apart from the first 4 KiB boundary
  float* a = pool.data() + (4096 - reinterpret_cast<std::uintptr_t>(pool.data()) % 4096) % 4096 / sizeof(float);
  float* b = a + step;
  float* c = a + 2 * step + offset / sizeof(float);
  const FloatVector av = random_vector(n * n, 1), bv = random_vector(n * n, 2);
  std::copy(av.begin(), av.end(), a);
  std::copy(bv.begin(), bv.end(), b);
  time_raw_sgemm(state, n, a, b, c, 1);
}

// xgrad::matmul and raw cblas_sgemm alternating within every iteration, on the same A, B and
// the same output block: each round times `calls` matmuls (each output freed before the next
// is made, so malloc hands the same block back), then takes one more matmul's output and runs
// `calls` raw cblas_sgemm into it. Drift between the two cancels, and both write C at the same
// address. Counters: medians over rounds of the per-call time of each side and their ratio;
// the reported time is the round's.
void BM_matmul_vs_cblas_same_buffers(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  const int ni = int(n);
  const std::size_t calls = std::max<std::size_t>(1, (std::size_t(1) << 24) / (n * n * n));
  xgrad::Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2);
  const float *pa = a.data<float>(), *pb = b.data<float>();
  RawBlasThreads blas(xgrad::num_threads());
  std::vector<double> xgrad_us, cblas_us;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = clock::now();
    for (std::size_t i = 0; i < calls; ++i) {
      xgrad::Tensor c = xgrad::matmul(a, b);
      benchmark::DoNotOptimize(c.data<float>());
      benchmark::ClobberMemory();
    }
    const auto t1 = clock::now();
    xgrad::Tensor out = xgrad::matmul(a, b);
    float* pc = out.mutable_data<float>();
    const auto t2 = clock::now();
    for (std::size_t i = 0; i < calls; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, pa, ni, pb, ni,
                  0.0f, pc, ni);
      benchmark::DoNotOptimize(pc);
      benchmark::ClobberMemory();
    }
    const auto t3 = clock::now();
    const double x = std::chrono::duration<double, std::micro>(t1 - t0).count();
    const double c = std::chrono::duration<double, std::micro>(t3 - t2).count();
    xgrad_us.push_back(x / double(calls));
    cblas_us.push_back(c / double(calls));
    state.SetIterationTime((x + c) * 1e-6);
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double mx = median(xgrad_us), mc = median(cblas_us);
  state.counters["xgrad_us"] = mx;
  state.counters["cblas_us"] = mc;
  state.counters["ratio"] = mx / mc;
}

// What every op pays before any arithmetic: making its n x n float32 output tensor (TensorImpl
// with its shape, Storage, data buffer: three blocks from the per-thread caches) and freeing it.
void BM_make_output_tensor(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  for (auto _ : state) {
    xgrad::Tensor t = xgrad::empty_tensor<float>({n, n});
    benchmark::DoNotOptimize(t.raw_data());
    benchmark::ClobberMemory();
  }
}

// --- forward + backward: three GEMMs -------------------------------------------------
// C = A B, then backward with a random upstream gradient G: dA = G B^T, dB = A^T G.
void BM_xgrad_matmul_fwd_bwd(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  xgrad::Tensor a = random_tensor({n, n}, 1).set_requires_grad();
  xgrad::Tensor b = random_tensor({n, n}, 2).set_requires_grad();
  xgrad::Tensor g = random_tensor({n, n}, 3);
  for (auto _ : state) {
    a.zero_grad();
    b.zero_grad();
    xgrad::Tensor c = xgrad::matmul(a, b);
    c.backward(g);
    benchmark::DoNotOptimize(a.grad().data<float>());
    benchmark::DoNotOptimize(b.grad().data<float>());
    benchmark::ClobberMemory();
  }
  set_flops(state, 3 * gemm_flops(n));
}

// y = x W^T + bias (x: (n, n), W: (n, n), bias: (n)); backward: dx = G W, dW = G^T x,
// dbias = column sums of G.
void BM_xgrad_linear_fwd_bwd(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  xgrad::Tensor x = random_tensor({n, n}, 1).set_requires_grad();
  xgrad::Tensor w = random_tensor({n, n}, 2).set_requires_grad();
  xgrad::Tensor bias = random_tensor({n}, 4).set_requires_grad();
  xgrad::Tensor g = random_tensor({n, n}, 3);
  for (auto _ : state) {
    x.zero_grad();
    w.zero_grad();
    bias.zero_grad();
    xgrad::Tensor y = xgrad::linear(x, w, bias);
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().data<float>());
    benchmark::DoNotOptimize(w.grad().data<float>());
    benchmark::DoNotOptimize(bias.grad().data<float>());
    benchmark::ClobberMemory();
  }
  set_flops(state, 3 * gemm_flops(n));
}

// The same three GEMMs with raw cblas (transposes as flags, preallocated outputs).
void BM_cblas_sgemm_fwd_bwd(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  const int ni = int(n);
  FloatVector a = random_vector(n * n, 1), b = random_vector(n * n, 2),
                     g = random_vector(n * n, 3), c(n * n), da(n * n), db(n * n);
  RawBlasThreads blas(xgrad::num_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data(), ni,
                b.data(), ni, 0.0f, c.data(), ni);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, ni, ni, 1.0f, g.data(), ni,
                b.data(), ni, 0.0f, da.data(), ni);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data(), ni,
                g.data(), ni, 0.0f, db.data(), ni);
    benchmark::DoNotOptimize(c.data());
    benchmark::DoNotOptimize(da.data());
    benchmark::DoNotOptimize(db.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 3 * gemm_flops(n));
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(64)->Arg(256)->Arg(1024)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// detail::transpose (rows, cols) -> (cols, rows), both dense: the packed B^T of xgrad's GEMM
// (1536 x 512: the in-projection weight) and attention's K^T / V^T panels (2048 x 64); on the
// CPU path XGRAD_CPU_PATH picks.
void BM_transpose(benchmark::State& state) {
  const auto rows = std::size_t(state.range(0)), cols = std::size_t(state.range(1));
  std::vector<float> src(rows * cols, 1.0f), dst(rows * cols);
  for (auto _ : state) {
    xgrad::detail::transpose(rows, cols, src.data(), cols, dst.data(), rows);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(2 * rows * cols * sizeof(float)));
}

// detail::tiled_gemm on one attention head of the reverse model's training step (T = S = D =
// 16, E = 64: Q, K, V as strided columns of packed qkv, row stride 3E = 192), the six products
// of its forward and backward in turn: scores Q K^T and dP = dO V^T (K^T, V^T packed, ld 16),
// O = P V and dQ = dS K (ld 192), dV^T = dO^T P and dK^T = Q^T dS (op(A) transposed).
// 6 x 16^3 multiply-adds per iteration; on the CPU path XGRAD_CPU_PATH picks.
void BM_head_gemms(benchmark::State& state) {
  constexpr std::size_t L = 16, E3 = 192;
  std::vector<float> qkv(L * E3, 0.5f), kt(L * L, 0.25f), p(L * L, 0.125f), out(L * L), g(L * L);
  for (auto _ : state) {
    using xgrad::detail::tiled_gemm;
    tiled_gemm(false, L, L, L, 0.25f, qkv.data(), E3, kt.data(), L, 0.0f, out.data(), L);        // Q K^T
    tiled_gemm(false, L, L, L, 1.0f, p.data(), L, qkv.data() + 128, E3, 0.0f, out.data(), L);     // P V
    tiled_gemm(true, L, L, L, 1.0f, qkv.data(), E3, p.data(), L, 1.0f, g.data(), L);             // dV^T
    tiled_gemm(false, L, L, L, 1.0f, qkv.data(), E3, kt.data(), L, 0.0f, g.data(), L);           // dP
    tiled_gemm(false, L, L, L, 0.25f, g.data(), L, qkv.data() + 64, E3, 0.0f, out.data(), L);     // dQ
    tiled_gemm(true, L, L, L, 0.25f, qkv.data(), E3, g.data(), L, 1.0f, p.data(), L);            // dK^T
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(g.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(std::int64_t(state.iterations()) * 6);
}

// float64 C (M, N) = op(A) op(B): xgrad's own kernels (detail::tiled_gemm_f64, which
// gemm<double> runs where OpenBLAS falls back to generic pre-AVX kernels) against cblas_dgemm
// (whatever family OpenBLAS runs: OPENBLAS_CORETYPE picks one). Args: M, N, K, trans_a,
// trans_b; the shapes of the gradexp example's products (an attention head of 17 positions,
// its projections and a long-K weight gradient) and two squares.
void dgemm_case(benchmark::State& state, bool own) {
  const auto M = std::size_t(state.range(0)), N = std::size_t(state.range(1)), K = std::size_t(state.range(2));
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  std::vector<double> a(M * K), b(K * N), c(M * N);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = double(i % 7) * 0.1;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = double(i % 5) * 0.3;
  const std::size_t lda = ta ? M : K, ldb = tb ? K : N;
  for (auto _ : state) {
    if (own)
      xgrad::detail::tiled_gemm_f64(ta, tb, M, N, K, 1.0, a.data(), lda, b.data(), ldb, 0.0, c.data(), N);
    else
      cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                  1.0, a.data(), int(lda), b.data(), int(ldb), 0.0, c.data(), int(N));
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(M) * double(N) * double(K) * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}
void BM_dgemm_own(benchmark::State& state) {
  if (xgrad::cpu_path() == xgrad::CpuPath::Baseline) return state.SkipWithError("needs the avx2 or avx512 path");
  dgemm_case(state, true);
}
void BM_dgemm_blas(benchmark::State& state) { dgemm_case(state, false); }
void dgemm_shapes(benchmark::internal::Benchmark* b) {
  for (const auto& s : std::vector<std::vector<std::int64_t>>{{17, 16, 17, 0, 0}, {17, 17, 16, 0, 1}, {17, 16, 17, 1, 0},
                                                             {4352, 64, 32, 0, 1}, {2912, 96, 32, 0, 1}, {96, 32, 8704, 1, 0},
                                                             {256, 256, 256, 0, 0}, {1024, 1024, 1024, 0, 0}})
    b->Args(s);
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_xgrad_matmul)->Apply(sizes);
BENCHMARK(BM_cblas_sgemm)->Apply(sizes);
BENCHMARK(BM_cblas_sgemm_offset)->Arg(0)->Arg(16)->Arg(32)->Arg(48)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cblas_sgemm_c_offset)->DenseRange(0, 4032, 64)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_transpose)->Args({1536, 512})->Args({512, 512})->Args({2048, 64})->Args({64, 2048})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_head_gemms)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_make_output_tensor)->Arg(4)->Arg(64)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_xgrad_matmul)->Arg(4)->UseRealTime()->Unit(benchmark::kNanosecond);
BENCHMARK(BM_cblas_sgemm)->Arg(4)->UseRealTime()->Unit(benchmark::kNanosecond);
BENCHMARK(BM_dgemm_own)->Apply(dgemm_shapes);
BENCHMARK(BM_dgemm_blas)->Apply(dgemm_shapes);
BENCHMARK(BM_matmul_vs_cblas_same_buffers)->Arg(64)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_xgrad_matmul_fwd_bwd)->Apply(sizes);
BENCHMARK(BM_xgrad_linear_fwd_bwd)->Apply(sizes);
BENCHMARK(BM_cblas_sgemm_fwd_bwd)->Apply(sizes);

// Thread count from XGRAD_THREADS (default 1); exits with a message on a bad value.
}  // namespace

int main(int argc, char** argv) {
  set_threads_from_env("bench_matmul");
  return run_benchmarks(argc, argv);
}
