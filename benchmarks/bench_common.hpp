// Shared by the benchmark programs: thread setup, random inputs, the benchmark main's tail.
//
// xgrad's thread count comes from XGRAD_THREADS (default 1), is set, recorded in the
// benchmark context and returned.
//
// xgrad keeps OpenBLAS single-threaded and splits work over its own threads (runtime.hpp).
// Raw cblas reference cases therefore give OpenBLAS the same count for their duration with
// RawBlasThreads (OpenBLAS's own threading is the reference), and put it back to 1 after.
#pragma once
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <xgrad/framework/array.hpp>  // AlignedAllocator
#include <xgrad/framework/runtime.hpp>

inline int set_threads_from_env(const char* program) {
  int threads = 1;
  if (const char* env = std::getenv("XGRAD_THREADS"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > 1024) {
      std::cerr << program << ": XGRAD_THREADS must be a positive integer, got '" << env << "'\n";
      std::exit(2);
    }
    threads = int(n);
  }
  xgrad::set_num_threads(threads);
  xgrad::tune_allocator();  // as the examples' training loops do
  const xgrad::RuntimeInfo info = xgrad::runtime_info();
  benchmark::AddCustomContext("xgrad_threads", std::to_string(threads));
  benchmark::AddCustomContext("xgrad_version", info.version + " (" + info.commit + ")");
  benchmark::AddCustomContext("cpu_model", info.cpu_model);
  benchmark::AddCustomContext("xgrad_cpu_path", info.cpu_path);
  benchmark::AddCustomContext("openblas_core", info.blas_core);
  if (!info.blas_coretype_env.empty()) benchmark::AddCustomContext("openblas_coretype_env", info.blas_coretype_env);
  return threads;
}

struct RawBlasThreads {  // openblas_set_num_threads: OpenBLAS's cblas.h
  explicit RawBlasThreads(int n) { openblas_set_num_threads(n); }
  ~RawBlasThreads() { openblas_set_num_threads(1); }
  RawBlasThreads(const RawBlasThreads&) = delete;
  RawBlasThreads& operator=(const RawBlasThreads&) = delete;
};

// Raw reference buffers, aligned like xgrad's tensor storage (a 64x64 sgemm runs up to 14%
// slower on 16-byte-aligned inputs, so both sides of a comparison get the same alignment).
using FloatVector = std::vector<float, xgrad::AlignedAllocator<float>>;

// size values from N(0, 1), reproducible from seed.
inline FloatVector random_vector(std::size_t size, unsigned seed) {
  xgrad::Rng rng(seed);
  FloatVector v(size);
  for (auto& x : v) x = float(rng.normal());
  return v;
}

// The end of every benchmark main: parse flags, run what they select.
inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
