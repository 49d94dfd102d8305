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

#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

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

void BM_cblas_sgemm(benchmark::State& state) {
  const auto n = std::size_t(state.range(0));
  const int ni = int(n);
  FloatVector a = random_vector(n * n, 1), b = random_vector(n * n, 2), c(n * n);
  RawBlasThreads blas(xgrad::num_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data(), ni,
                b.data(), ni, 0.0f, c.data(), ni);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, gemm_flops(n));
}

// Raw 64 x 64 cblas_sgemm with A and B starting `offset` bytes past a 64-byte boundary (C
// aligned): why xgrad's storage and the reference buffers above are 64-byte aligned.
void BM_cblas_sgemm_offset(benchmark::State& state) {
  const int n = 64;
  const auto offset = std::size_t(state.range(0));
  FloatVector a = random_vector(n * n + 16, 1), b = random_vector(n * n + 16, 2), c(n * n);
  const float* pa = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.data()) + offset);
  const float* pb = reinterpret_cast<const float*>(reinterpret_cast<const char*>(b.data()) + offset);
  RawBlasThreads blas(1);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, gemm_flops(n));
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

BENCHMARK(BM_xgrad_matmul)->Apply(sizes);
BENCHMARK(BM_cblas_sgemm)->Apply(sizes);
BENCHMARK(BM_cblas_sgemm_offset)->Arg(0)->Arg(16)->Arg(32)->Arg(48)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_xgrad_matmul_fwd_bwd)->Apply(sizes);
BENCHMARK(BM_xgrad_linear_fwd_bwd)->Apply(sizes);
BENCHMARK(BM_cblas_sgemm_fwd_bwd)->Apply(sizes);

// Thread count from XGRAD_THREADS (default 1); exits with a message on a bad value.
}  // namespace

int main(int argc, char** argv) {
  set_threads_from_env("bench_matmul");
  return run_benchmarks(argc, argv);
}
