#!/usr/bin/env bash
# Installs the Debian dependencies, then builds and runs every test:
#   1. Release build (build/, GCC): the whole ctest suite;
#   2. the numeric suites (xgrad_tests) once per CPU code path this CPU runs (XGRAD_CPU_PATH)
#      and per OpenBLAS kernel family it runs (OPENBLAS_CORETYPE), so a machine exercises the
#      code that other machines (AVX-512 Xeons, AVX2-only EPYCs, plain x86-64) take;
#   3. ThreadSanitizer build (build-tsan/): the threaded suites and the thread stress test;
#   4. clang build (build-clang/, clang 14): the whole ctest suite;
#   5. AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/): the same suite
#      (all but the install-consumer test, whose separate program cannot load the ASan runtime);
#   6. the libFuzzer targets, each for a bounded time (scripts/run-fuzz.sh).
# XGRAD_QUICK=1 runs step 1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j 2
(cd build && ctest --output-on-failure -j 1)
[ "${XGRAD_QUICK:-0}" = 1 ] && exit 0

echo "=== numeric suites per CPU path and OpenBLAS kernel family ==="
bash scripts/test-matrix.sh build

echo "=== ThreadSanitizer: threaded suites and the stress test ==="
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_TSAN=ON \
  -DXGRAD_BUILD_EXAMPLES=OFF
cmake --build build-tsan -j 2 --target xgrad_tests
TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
  build-tsan/tests/xgrad_tests --run_test=parallel,threads_stress,attention_op --report_level=short

echo "=== clang 14 build ==="
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++
cmake --build build-clang -j 2
(cd build-clang && ctest --output-on-failure -j 1)

echo "=== sanitizers: ASan + UBSan ==="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_SANITIZE=ON
cmake --build build-asan -j 2
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j 1 -E 'install_consumer|doc_snippets')  # both link outside programs against the sanitized library

if [ -f scripts/run-fuzz.sh ]; then
  echo "=== fuzzing ==="
  bash scripts/run-fuzz.sh "${XGRAD_FUZZ_SECONDS:-60}"
fi
