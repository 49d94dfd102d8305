#!/usr/bin/env bash
# Installs the Debian dependencies, then builds and runs every test:
#   1. Release build (build/, GCC 12): the whole ctest suite;
#   2. the numeric suites (xgrad_tests) once per CPU code path this CPU runs (XGRAD_CPU_PATH)
#      and per OpenBLAS kernel family it runs (OPENBLAS_CORETYPE), so a machine exercises the
#      code that other machines (AVX-512 Xeons, AVX2-only EPYCs, plain x86-64) take;
#   3. ThreadSanitizer build (build-tsan/, only the library and xgrad_threaded_tests: the
#      threaded suites and the thread stress test);
#   4. clang 14 build with AddressSanitizer + UndefinedBehaviorSanitizer (build-sanitize/): the
#      whole ctest suite but the two tests that link outside programs against the installed
#      library (install_consumer, doc_snippets; both run in step 1). This is the clang build
#      too: GCC and clang each build and run everything once;
#   5. the libFuzzer targets, each for a bounded time (scripts/run-fuzz.sh, build-fuzz/: only
#      the library, instrumented for coverage, and the two targets; coverage instrumentation
#      is kept out of step 4, where it would slow every test).
# XGRAD_QUICK=1 runs step 1 only. Each stage prints its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
stage() { echo "=== stage done: $1 at $(( $(date +%s) - T0 )) s"; }
bash scripts/install-deps.sh
stage "dependencies"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j 2
(cd build && ctest --output-on-failure -j 1)
stage "GCC Release build + ctest"
[ "${XGRAD_QUICK:-0}" = 1 ] && exit 0

echo "=== numeric suites per CPU path and OpenBLAS kernel family ==="
bash scripts/test-matrix.sh build
stage "test matrix"

echo "=== ThreadSanitizer: threaded suites and the stress test ==="
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_TSAN=ON \
  -DXGRAD_BUILD_EXAMPLES=OFF -DXGRAD_MPI=OFF
cmake --build build-tsan -j 2 --target xgrad_threaded_tests
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/tests/xgrad_threaded_tests --report_level=short
stage "ThreadSanitizer"

echo "=== clang 14: ASan + UBSan build, whole ctest ==="
# -O1 -g1: the usual setting for sanitizer builds; keeps this build's compile time down.
CC=clang CXX=clang++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DXGRAD_SANITIZE=ON
cmake --build build-sanitize -j 2
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j 1 -E 'install_consumer|doc_snippets')  # both link outside programs against the sanitized library
stage "clang ASan + UBSan build + ctest"

echo "=== fuzzing ==="
bash scripts/run-fuzz.sh "${XGRAD_FUZZ_SECONDS:-60}"
stage "fuzzing"
