#!/usr/bin/env bash
# Runs tests/distributed/dist_tests under mpirun with NP ranks (--oversubscribe: more ranks than
# cores), twice: every check passes on every rank, and the two runs print the same digests of
# the trained parameters (for a fixed NP, results do not depend on timing).
# Usage: run.sh NP BUILD_DIR
set -euo pipefail
np=$1 build=$2
exe=$build/tests/distributed/dist_tests
# Open MPI refuses to start as root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under AddressSanitizer: Open MPI keeps allocations until exit (reported as leaks): suppress them.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
# With clang's ASan the leaked blocks' stacks end in Open MPI components that MPI_Finalize has
# already unloaded ("<unknown module>"), which no suppression can name: leak checking is off for
# the programs mpirun starts (ASan and UBSan stay on; distributed_solo, the same tests without
# mpirun, keeps leak checking).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export XGRAD_DIST_TIMEOUT=${XGRAD_DIST_TIMEOUT:-60} XGRAD_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for run in 1 2; do
  if ! mpirun -np "$np" --oversubscribe "$exe" --report_level=short > "$work/run$run.log" 2>&1; then
    cat "$work/run$run.log"
    echo "dist_tests failed with $np ranks (run $run)"
    exit 1
  fi
  grep -E '^(dist_tests|float|ZeRO|digest|mismatch|out of step|different)' "$work/run$run.log" | sed "s/^/run $run: /"
done
d1=$(grep '^digest' "$work/run1.log") d2=$(grep '^digest' "$work/run2.log")
[ -n "$d1" ] || { echo "no digest printed"; exit 1; }
[ "$d1" = "$d2" ] || { echo "two runs with $np ranks differ: $d1 vs $d2"; exit 1; }
echo "dist_tests: $np ranks, two runs, bit-identical parameters"
