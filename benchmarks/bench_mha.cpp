// bench_mha: the workloads of the "Performance" issue, xgrad side.
//
//   BM_mha_bool_mask/<cfg>  the same with causality as an explicit bool attn_mask
//   BM_mha_at_threads/large/threads:<n>  BM_mha/large on n of xgrad's threads for its duration
//                        (set_num_threads), n = 1 and the run's count when that is not 1: run with
//                        --benchmark_enable_random_interleaving, the thread-scaling ratio from
//                        repetitions interleaved in one process (compare.sh)
//   BM_mha/<cfg>         MultiHeadAttention self-attention, float32, causal (is_causal), need_weights
//                        off, forward + backward to the input and every parameter:
//                          out = mha(x, x, x); loss = sum(out * upstream); loss.backward()
//                        cfg: tiny B1 T8 E16 H2, small B8 T32 E64 H4, mid B8 T64 E128 H8,
//                             large B4 T512 E512 H8   (bias on, dropout 0, as nn.MultiheadAttention)
//   BM_cblas_sgemm_ref/threads:<n>   raw cblas_sgemm M 2048, N 1536, K 512 into a preallocated
//                        output: the size of large's in-projection GEMM (B*T, 3E, E). threads:1 is
//                        always measured (the ">= 90% of single-thread cblas" reference); the
//                        current thread count is measured too when it is not 1.
//   BM_cblas_mha_gemms/<cfg>  every GEMM the layer performs (forward and backward, the shapes
//                        below), with raw cblas on preallocated buffers, no softmax: the GEMM floor.
//   BM_cblas_mha_projections/<cfg>  the in- and out-projection GEMMs of that alone (forward and
//                        backward, one cblas call each): what no attention kernel can remove
//                        (counter GFLOP: their 24 B T E^2 only).
//   BM_xgrad_mha_projections/<cfg>  the same six products through xgrad's float32 GEMM
//                        (detail::gemm<float>: OpenBLAS, or xgrad's own kernels where
//                        tiled_gemm_fits, ops/detail.hpp)
//   BM_train_step_reverse  one training step of the `reverse` example's default model
//                        (benchmarks/reverse_step.hpp; compare with torch_mha.py's train_step),
//                        which skips the padding positions (TransformerConfig::skip_padding)
//   BM_train_step_reverse_dense  the same step over every position, padding included, as
//                        PyTorch's nn.TransformerEncoder trains (skip_padding false)
//
// Threads: XGRAD_THREADS=<n> (default 1) sets OpenBLAS's count for the whole run.
// Times are wall clock (UseRealTime), unit ms.
//
// FLOP count (counter GFLOP/s), from the GEMMs of the layer, dense (the causal mask does not
// reduce the count: the score and p·v GEMMs are counted full T x S, as PyTorch performs them;
// xgrad's attention op skips key blocks wholly in the future, so it performs fewer — see
// performed_flops in compare.sh),
// with N = B*T, S = T, D = E/H:
//   forward   in-projection  (N,E)x(E,3E)           2*N*E*3E  = 6 N E^2
//             scores         B*H x (T,D)x(D,S)      2*B*T*S*E
//             p·v            B*H x (T,S)x(S,D)      2*B*T*S*E
//             out-projection (N,E)x(E,E)            2 N E^2
//             total F = 8 B T E^2 + 4 B T^2 E
//   backward  two GEMMs of the same size per forward GEMM (gradient of each operand; the input
//             and every weight require grad): 2F
//   fwd+bwd   3F = 24 B T E^2 + 12 B T^2 E
//   large: 24*4*512*512^2 + 12*4*512^2*512 = 12.885e9 + 6.442e9 = 19.33 GFLOP per iteration.
// Element-wise work (bias adds, scaling, softmax, reshapes) is not counted.
#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include "reverse_step.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/xgrad.hpp"

namespace {

struct MhaConfig {
  const char* name;
  std::size_t B, T, E, H;
};

const MhaConfig kConfigs[] = {
    {"tiny", 1, 8, 16, 2}, {"small", 8, 32, 64, 4}, {"mid", 8, 64, 128, 8}, {"large", 4, 512, 512, 8}};
const MhaConfig& kLarge = kConfigs[3];

// The projections' part of it (in- and out-projection, forward and backward): 24 B T E^2.
double projection_flops(const MhaConfig& c) { return 24.0 * double(c.B) * double(c.T) * double(c.E) * double(c.E); }
double mha_flops(const MhaConfig& c) {
  return projection_flops(c) + 12.0 * double(c.B) * double(c.T) * double(c.T) * double(c.E);
}

void set_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP"] = flops_per_iter * 1e-9;
}

// bool_mask: causality as an explicit bool attn_mask (causal_mask(T), as PyTorch 1.13 users
// write it) instead of is_causal; the op detects it (ops/attention.hpp) and takes the same path.
void BM_mha(benchmark::State& state, MhaConfig c, bool bool_mask) {
  xgrad::Rng rng(0);
  xgrad::MultiHeadAttention mha(xgrad::MultiHeadAttentionOptions(c.E, c.H), rng);
  xgrad::Tensor x = xgrad::randn({c.B, c.T, c.E}, rng).set_requires_grad();
  xgrad::Tensor upstream = xgrad::randn({c.B, c.T, c.E}, rng);
  xgrad::AttentionOptions opt;
  if (bool_mask) opt.attn_mask = xgrad::causal_mask(c.T);
  else opt.is_causal = true;
  opt.need_weights = false;
  const auto params = mha.parameters();
  for (auto _ : state) {
    x.zero_grad();
    mha.zero_grad();
    xgrad::Tensor out = mha.forward(x, opt).output;
    xgrad::Tensor loss = xgrad::sum(xgrad::mul(out, upstream));
    loss.backward();
    benchmark::DoNotOptimize(x.grad().data<float>());
    for (const auto& p : params) benchmark::DoNotOptimize(p.grad().data<float>());
    benchmark::ClobberMemory();
  }
  set_flops(state, mha_flops(c));
  state.counters["B"] = double(c.B), state.counters["T"] = double(c.T);
  state.counters["E"] = double(c.E), state.counters["H"] = double(c.H);
}

// BM_mha on n threads, the run's count (XGRAD_THREADS) restored after.
void BM_mha_at_threads(benchmark::State& state, MhaConfig c, int n) {
  const int run_threads = xgrad::num_threads();
  xgrad::set_num_threads(n);
  BM_mha(state, c, false);
  xgrad::set_num_threads(run_threads);
  state.counters["threads"] = n;
}

// Raw cblas_sgemm at large's in-projection size, with `threads` OpenBLAS threads.
void BM_cblas_sgemm_ref(benchmark::State& state, int threads) {
  const int M = 2048, N = 1536, K = 512;
  RawBlasThreads blas(threads);
  FloatVector a = random_vector(std::size_t(M) * K, 1), w = random_vector(std::size_t(N) * K, 2),
                     c(std::size_t(M) * N);
  for (auto _ : state) {
    // C (M,N) = A (M,K) W^T, W (N,K): as linear(x, W).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, w.data(), K, 0.0f,
                c.data(), N);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * M * N * K);
  state.counters["threads"] = threads;
}

// Every GEMM of the MHA layer, forward and backward, raw cblas (or xgrad's gemm<float>, with
// `xgrad_gemm`) with strided head slices and preallocated outputs (the GEMM floor of BM_mha; no
// softmax, no bias).
void BM_mha_gemms(benchmark::State& state, MhaConfig c, bool heads, bool xgrad_gemm) {
  const int B = int(c.B), T = int(c.T), S = int(c.T), E = int(c.E), H = int(c.H), D = E / H;
  const int N = B * T, E3 = 3 * E;
  const auto sz = [](long n) { return std::size_t(n); };
  RawBlasThreads blas(xgrad::num_threads());
  FloatVector x = random_vector(sz(N) * E, 1), win = random_vector(sz(E3) * E, 2),
                     wout = random_vector(sz(E) * E, 3), g = random_vector(sz(N) * E, 4),
                     qkv(sz(N) * E3), p(sz(B) * H * T * S), ctx(sz(N) * E), y(sz(N) * E),
                     dctx(sz(N) * E), dwout(sz(E) * E), dp(sz(T) * S), dqkv(sz(N) * E3),
                     dx(sz(N) * E), dwin(sz(E3) * E);
  for (float& v : p) v = 1.0f / float(S);
  // Without the heads nothing writes ctx and dqkv: random, like the rest, not zeros that
  // gemm<float> would skip as rows of exact zeros (ops/detail.cpp) where cblas computes them.
  if (!heads) ctx = random_vector(sz(N) * E, 5), dqkv = random_vector(sz(N) * E3, 6);
  const auto gemm = [xgrad_gemm](CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a,
                                 int lda, const float* b, int ldb, float* out, int ldc) {
    if (xgrad_gemm)
      xgrad::detail::gemm<float>(ta == CblasTrans, tb == CblasTrans, std::size_t(m), std::size_t(n), std::size_t(k),
                                 1.0f, a, std::size_t(lda), b, std::size_t(ldb), 0.0f, out, std::size_t(ldc));
    else
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out, ldc);
  };
  const auto NT = CblasNoTrans, TR = CblasTrans;
  for (auto _ : state) {
    gemm(NT, TR, N, E3, E, x.data(), E, win.data(), E, qkv.data(), E3);  // qkv = x Win^T
    for (int b = 0; b < B && heads; ++b)
      for (int h = 0; h < H; ++h) {
        const float* q = qkv.data() + sz(b) * T * E3 + h * D;
        const float* k = q + E;
        const float* v = q + 2 * E;
        float* ph = p.data() + (sz(b) * H + h) * T * S;
        gemm(NT, TR, T, S, D, q, E3, k, E3, ph, S);                            // scores = q k^T
        gemm(NT, NT, T, D, S, ph, S, v, E3, ctx.data() + sz(b) * T * E + h * D, E);  // p v
      }
    gemm(NT, TR, N, E, E, ctx.data(), E, wout.data(), E, y.data(), E);  // y = ctx Wout^T
    // backward
    gemm(NT, NT, N, E, E, g.data(), E, wout.data(), E, dctx.data(), E);  // dctx = g Wout
    gemm(TR, NT, E, E, N, g.data(), E, ctx.data(), E, dwout.data(), E);  // dWout = g^T ctx
    for (int b = 0; b < B && heads; ++b)
      for (int h = 0; h < H; ++h) {
        const float* q = qkv.data() + sz(b) * T * E3 + h * D;
        const float* k = q + E;
        const float* v = q + 2 * E;
        const float* ph = p.data() + (sz(b) * H + h) * T * S;
        const float* dch = dctx.data() + sz(b) * T * E + h * D;
        float* dq = dqkv.data() + sz(b) * T * E3 + h * D;
        float* dk = dq + E;
        float* dv = dq + 2 * E;
        gemm(NT, TR, T, S, D, dch, E, v, E3, dp.data(), S);   // dP = dctx v^T
        gemm(TR, NT, S, D, T, ph, S, dch, E, dv, E3);         // dV = P^T dctx
        gemm(NT, NT, T, D, S, dp.data(), S, k, E3, dq, E3);   // dQ = dS k   (dS ~ dP here)
        gemm(TR, NT, S, D, T, dp.data(), S, q, E3, dk, E3);   // dK = dS^T q
      }
    gemm(NT, NT, N, E, E3, dqkv.data(), E3, win.data(), E, dx.data(), E);  // dx = dqkv Win
    gemm(TR, NT, E3, E, N, dqkv.data(), E3, x.data(), E, dwin.data(), E);  // dWin = dqkv^T x
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dwin.data());
    benchmark::DoNotOptimize(dwout.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, heads ? mha_flops(c) : projection_flops(c));
}

void BM_train_step_reverse(benchmark::State& state, bool skip_padding) {
  xgrad_bench::ReverseTrainer trainer(skip_padding);
  for (auto _ : state) {
    xgrad::Tensor loss = trainer.step();
    benchmark::DoNotOptimize(loss.data<float>());
    benchmark::ClobberMemory();
  }
  state.counters["params"] = double(trainer.parameter_count());
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = set_threads_from_env("bench_mha");
  for (const MhaConfig& c : kConfigs)
    benchmark::RegisterBenchmark((std::string("BM_mha/") + c.name).c_str(), BM_mha, c, false)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (const MhaConfig& c : kConfigs)
    benchmark::RegisterBenchmark((std::string("BM_mha_bool_mask/") + c.name).c_str(), BM_mha, c, true)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (const int n : threads != 1 ? std::vector<int>{1, threads} : std::vector<int>{1})
    benchmark::RegisterBenchmark(("BM_mha_at_threads/large/threads:" + std::to_string(n)).c_str(), BM_mha_at_threads,
                                 kLarge, n)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_cblas_sgemm_ref/threads:1", BM_cblas_sgemm_ref, 1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  if (threads != 1)
    benchmark::RegisterBenchmark(("BM_cblas_sgemm_ref/threads:" + std::to_string(threads)).c_str(),
                                 BM_cblas_sgemm_ref, threads)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (const MhaConfig& c : kConfigs)
    benchmark::RegisterBenchmark((std::string("BM_cblas_mha_gemms/") + c.name).c_str(), BM_mha_gemms, c, true,
                                 false)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (const MhaConfig& c : kConfigs)
    benchmark::RegisterBenchmark((std::string("BM_cblas_mha_projections/") + c.name).c_str(), BM_mha_gemms, c,
                                 false, false)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (const MhaConfig& c : kConfigs)
    benchmark::RegisterBenchmark((std::string("BM_xgrad_mha_projections/") + c.name).c_str(), BM_mha_gemms, c,
                                 false, true)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_train_step_reverse", BM_train_step_reverse, true)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_train_step_reverse_dense", BM_train_step_reverse, false)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  return run_benchmarks(argc, argv);
}
