// Shared by the benchmark programs: the OpenBLAS thread count comes from XGRAD_THREADS
// (default 1), is set, recorded in the benchmark context and returned.
#pragma once
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iostream>
#include <string>

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
  benchmark::AddCustomContext("xgrad_threads", std::to_string(threads));
  benchmark::AddCustomContext("openblas_threads", std::to_string(xgrad::num_threads()));
  return threads;
}
