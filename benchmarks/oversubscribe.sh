#!/usr/bin/env bash
# The thread pool under oversubscription: the `reverse` example for a fixed number of steps
# with --threads 1 and --threads 2, on an idle machine and with a CPU hog (a busy loop in
# another process) beside it. Prints the median wall time of each and whether the final
# checkpoints are bit-identical (they must be: results never depend on the thread count).
# usage: benchmarks/oversubscribe.sh [BUILD_DIR] [STEPS] [REPS]   (defaults: build 300 3)
set -euo pipefail
build=${1:-build}
steps=${2:-300}
reps=${3:-3}
bin=$build/examples/reverse
check=$build/tests/check_outputs  # built with -DXGRAD_BUILD_TESTS=ON
[ -x "$check" ] || { echo "oversubscribe.sh: no $check (configure $build with -DXGRAD_BUILD_TESTS=ON)" >&2; exit 1; }
work=$(mktemp -d)
hog_pid=
cleanup() { [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

run() {  # threads tag -> median seconds
  local times=()
  for r in $(seq "$reps"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$bin" --steps "$steps" --eval-every "$steps" --threads "$1" --no-plots --out "$work/$2-$r" >/dev/null 2>&1
    t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'
}

echo "reverse, $steps steps, median of $reps; $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
idle1=$(run 1 idle1); idle2=$(run 2 idle2)
echo "idle:          --threads 1 ${idle1} s   --threads 2 ${idle2} s   speedup $(awk -v a="$idle1" -v b="$idle2" 'BEGIN {printf "%.2f", a / b}')"
bash -c 'while :; do :; done' &
hog_pid=$!
hog1=$(run 1 hog1); hog2=$(run 2 hog2)
kill "$hog_pid"; hog_pid=
echo "one core busy: --threads 1 ${hog1} s   --threads 2 ${hog2} s   2 threads / 1 thread $(awk -v a="$hog2" -v b="$hog1" 'BEGIN {printf "%.2f", a / b}')"
# The checkpoints' tensors, bit for bit (tests' check_outputs; not the files: their metadata
# holds each run's wall time, "train_seconds").
for tag in idle2-1 hog1-1 hog2-1; do
  "$check" same "$work/idle1-1/checkpoint.safetensors" "$work/$tag/checkpoint.safetensors" >/dev/null ||
    { echo "checkpoint of $tag differs from idle1-1 (its tensors)"; exit 1; }
done
echo "checkpoints: bit-identical across thread counts and load"
