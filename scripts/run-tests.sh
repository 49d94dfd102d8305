#!/usr/bin/env bash
# Installs the Debian dependencies, then builds and runs every test:
#   1. Release build (build/): the whole ctest suite;
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/): the same suite
#      (all but the install-consumer test, whose separate program cannot load the ASan runtime);
#   3. the libFuzzer targets, each for a bounded time (scripts/run-fuzz.sh).
# XGRAD_QUICK=1 runs step 1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j 2
(cd build && ctest --output-on-failure -j 1)
[ "${XGRAD_QUICK:-0}" = 1 ] && exit 0

echo "=== sanitizers: ASan + UBSan ==="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_SANITIZE=ON
cmake --build build-asan -j 2
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j 1 -E install_consumer)

if [ -f scripts/run-fuzz.sh ]; then
  echo "=== fuzzing ==="
  bash scripts/run-fuzz.sh "${XGRAD_FUZZ_SECONDS:-60}"
fi
