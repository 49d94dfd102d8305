#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer, the
# library instrumented too) in build-fuzz/ and runs each one for SECONDS (default 60) on a
# copy of its committed seed corpus (tests/fuzz/corpus/<name>/; the repository is never
# modified). Exits non-zero on any crash, leak or sanitizer report, or a build failure.
# A target with a dictionary tests/fuzz/<name>.dict gets it (-dict=); fuzz_safetensors has
# one (JSON / safetensors tokens) and a structure-aware custom mutator built in.
#
#   bash scripts/run-fuzz.sh [SECONDS]
#   XGRAD_FUZZ_BUILD=build-myfuzz bash scripts/run-fuzz.sh [SECONDS]
#
# Prints, per target, the number of executions and the result, then a last line
#   fuzz: N passed, M failed
# Crash reproducers land in build-fuzz/fuzz-run/artifacts/; replay one with
#   ./build-fuzz/tests/fuzz/fuzz_ops build-fuzz/fuzz-run/artifacts/fuzz_ops-crash-...
# XGRAD_FUZZ_IGNORE="tag,..." silences known findings (see tests/fuzz/fuzz_ops.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DURATION=${1:-60}
if ! [[ "$DURATION" =~ ^[0-9]+$ ]] || [ "$DURATION" -lt 1 ]; then
  echo "usage: bash scripts/run-fuzz.sh [SECONDS]   (a positive whole number; default 60)" >&2
  exit 2
fi

find_tool() {  # first of the given commands on PATH
  for c in "$@"; do
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}
have_fuzzer_runtime() {
  local cxx rt
  cxx=$(find_tool clang++ clang++-14) || return 1
  rt=$("$cxx" --print-runtime-dir 2>/dev/null) || return 1
  [ -f "$rt/libclang_rt.fuzzer-x86_64.a" ] || [ -f "$rt/libclang_rt.fuzzer.a" ] ||
    ls "$rt"/libclang_rt.fuzzer*.a >/dev/null 2>&1
}
if ! find_tool clang clang-14 >/dev/null || ! have_fuzzer_runtime; then
  echo "run-fuzz: clang or its libFuzzer runtime is missing; installing dependencies"
  bash scripts/install-deps.sh
fi
CC_BIN=$(find_tool clang clang-14)
CXX_BIN=$(find_tool clang++ clang++-14)

# XGRAD_FUZZ_BUILD=DIR reuses a build directory already configured with clang and
# -DXGRAD_FUZZ=ON; else build-fuzz/ is configured here.
if [ -n "${XGRAD_FUZZ_BUILD:-}" ]; then
  BUILD=$XGRAD_FUZZ_BUILD
  if ! grep -q '^XGRAD_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
    echo "run-fuzz: XGRAD_FUZZ_BUILD=$BUILD is not a build directory configured with -DXGRAD_FUZZ=ON" >&2
    exit 2
  fi
else
  BUILD=build-fuzz
  CC="$CC_BIN" CXX="$CXX_BIN" cmake -S . -B "$BUILD" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS="-g -fno-omit-frame-pointer" \
    -DXGRAD_FUZZ=ON -DXGRAD_BUILD_TESTS=OFF -DXGRAD_BUILD_EXAMPLES=OFF -DXGRAD_BUILD_BENCHMARKS=OFF
fi
TARGETS=(fuzz_safetensors fuzz_ops)
if ! cmake --build "$BUILD" -j 2 --target "${TARGETS[@]}"; then
  echo "run-fuzz: the build failed (see above)"
  echo "fuzz: 0 passed, ${#TARGETS[@]} failed"
  exit 1
fi

case "$BUILD" in /*) BUILD_ABS=$BUILD ;; *) BUILD_ABS=$ROOT/$BUILD ;; esac
RUN="$BUILD_ABS/fuzz-run"
rm -rf "$RUN"
mkdir -p "$RUN/artifacts"
# Scratch files of fuzz_safetensors (rewritten every execution): tmpfs when available,
# since the round trip's save fsyncs.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  SCRATCH=$(mktemp -d /dev/shm/xgrad-fuzz.XXXXXX)
else
  SCRATCH=$(mktemp -d "$RUN/tmp.XXXXXX")
fi
trap 'rm -rf "$SCRATCH"' EXIT

export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# Without abort_on_error, a UBSan report exits before libFuzzer can save the input.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  SYMBOLIZER=$(find_tool llvm-symbolizer llvm-symbolizer-14 || true)
  if [ -n "$SYMBOLIZER" ]; then export ASAN_SYMBOLIZER_PATH="$SYMBOLIZER"; fi
fi

passed=0
failed=0
for target in "${TARGETS[@]}"; do
  name=${target#fuzz_}
  corpus="$RUN/corpus-$name"
  mkdir -p "$corpus"
  cp -R "tests/fuzz/corpus/$name/." "$corpus/"
  log="$RUN/$target.log"
  dict_args=()
  dict_note=""
  if [ -f "tests/fuzz/$name.dict" ]; then
    dict_args=(-dict="$ROOT/tests/fuzz/$name.dict")
    dict_note=", dictionary tests/fuzz/$name.dict"
  fi
  echo "== $target: ${DURATION}s on a copy of tests/fuzz/corpus/$name ($(ls "$corpus" | wc -l) seeds$dict_note)"
  set +e
  TMPDIR="$SCRATCH" "$BUILD_ABS/tests/fuzz/$target" \
    -max_total_time="$DURATION" -rss_limit_mb=4096 -timeout=60 -print_final_stats=1 \
    ${dict_args[@]+"${dict_args[@]}"} -artifact_prefix="$RUN/artifacts/$target-" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -a 'stat::number_of_executed_units:' "$log" | tail -n 1 | awk '{print $2}')
  reports=$(grep -a -c -E 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer|BUG:' "$log" || true)
  echo "$target: ${execs:-unknown} executions"
  if [ "$rc" -eq 0 ] && [ "$reports" -eq 0 ]; then
    echo "$target: passed"
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "$target: FAILED (exit code $rc, $reports sanitizer/bug report lines); log: $log"
    grep -a -E 'BUG:|ERROR: |runtime error:|SUMMARY:|Test unit written to' "$log" | head -n 20 | sed 's/^/  /'
    for f in "$RUN"/artifacts/"$target"-*; do
      [ -e "$f" ] && echo "  reproducer: $f"
    done
  fi
done

echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
