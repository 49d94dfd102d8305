#!/usr/bin/env bash
# Runs the numeric suites (xgrad_tests) once per CPU code path this CPU can run
# (XGRAD_CPU_PATH = baseline, avx2, avx512) crossed with OpenBLAS's default kernels and each
# kernel family this CPU can run (OPENBLAS_CORETYPE = Sandybridge, Haswell, Zen, SkylakeX,
# Cooperlake).
# If the environment already sets OPENBLAS_CORETYPE (some processors need a pinned kernel:
# older OpenBLAS builds compute wrong results or crash on them), it is left as it is and only
# the CPU paths vary. Usage: test-matrix.sh BUILD_DIR. Prints one line per run and a summary.
set -euo pipefail
build=${1:-build}
tests=$build/tests/xgrad_tests
source "$(dirname "$0")/cpu-flags.sh"  # has, xgrad_paths
paths=("${xgrad_paths[@]}")

if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  echo "test-matrix: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is set by this machine's environment;" \
       "left as it is (OpenBLAS kernel families are not varied here)"
  cores=(env)
else
  cores=(default)
  has avx && cores+=(Sandybridge)
  has avx2 fma && cores+=(Haswell Zen)
  has avx512f avx512bw avx512dq avx512vl && cores+=(SkylakeX)
  has avx512f avx512bw avx512dq avx512vl avx512_bf16 && cores+=(Cooperlake)  # the kernels Zen 4/5 get by default
fi

runs=0
failed=()
for core in "${cores[@]}"; do
  for path in "${paths[@]}"; do
    log=$(mktemp)
    if [ "$core" = default ] || [ "$core" = env ]; then
      env XGRAD_CPU_PATH="$path" "$tests" --report_level=short > "$log" 2>&1 && rc=0 || rc=$?
    else
      env XGRAD_CPU_PATH="$path" OPENBLAS_CORETYPE="$core" "$tests" --report_level=short > "$log" 2>&1 && rc=0 || rc=$?
    fi
    runs=$((runs + 1))
    summary=$(grep -m1 '^xgrad_tests on:' "$log" || echo "(no runtime line)")
    result=$(grep -E 'Test module "xgrad" has (passed|failed)' "$log" | head -1 || true)
    echo "[$core / $path] ${summary#xgrad_tests on: } :: ${result:-exit $rc}"
    if [ "$rc" != 0 ]; then
      failed+=("$core/$path")
      grep -E "error|fatal" "$log" | head -20 || true
    fi
    rm -f "$log"
  done
done
echo "test-matrix: $((runs - ${#failed[@]})) passed, ${#failed[@]} failed"
[ "${#failed[@]}" = 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
