#!/usr/bin/env bash
# Compiles main.cpp with clang++ -stdlib=libc++ and runs it: xgrad::Rng must give the numbers
# recorded with libstdc++ (expected.hpp). Exits 77 (ctest: skipped) when clang++ or libc++
# is not installed (Debian: clang-14 libc++-14-dev libc++abi-14-dev).
# Usage: run.sh INCLUDE_DIR WORK_DIR   (INCLUDE_DIR holds xgrad/framework/tensor.hpp)
# XGRAD_LIBCXX_CXX=/path/to/clang++ picks the compiler.
set -euo pipefail
include=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"

cxx=${XGRAD_LIBCXX_CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++ clang++-14; do
    if command -v "$c" > /dev/null 2>&1; then cxx=$c; break; fi
  done
fi
if [ -z "$cxx" ]; then
  echo "rng_libcxx: SKIPPED: no clang++ (apt-get install clang-14)"
  exit 77
fi
printf '#include <vector>\nint main() { std::vector<int> v(1); return v[0]; }\n' > "$work/probe.cpp"
if ! "$cxx" -std=c++17 -stdlib=libc++ "$work/probe.cpp" -o "$work/probe" > "$work/probe.log" 2>&1 ||
   ! "$work/probe"; then
  echo "rng_libcxx: SKIPPED: $cxx cannot build and run with -stdlib=libc++ (apt-get install libc++-14-dev libc++abi-14-dev):"
  cat "$work/probe.log"
  exit 77
fi
"$cxx" -std=c++17 -stdlib=libc++ -O2 -Wall -Wextra -Werror -I"$include" "$here/main.cpp" -o "$work/rng_libcxx"
"$work/rng_libcxx"
