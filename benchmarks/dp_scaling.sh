#!/usr/bin/env bash
# Data-parallel scaling of the `reverse` training step (benchmarks/bench_dp.cpp) on this machine:
# samples/s with 1 and 2 ranks at the same per-rank batch (1 thread per rank), the fraction of
# the step spent waiting for gradient communication with and without bucketing/overlap, and
# ZeRO-1's optimizer state per rank for 1, 2 and 4 ranks. With --split-wait the wait is split
# into waiting for the slowest rank (skew) and communication proper. Numbers are only
# meaningful on a quiet machine: the load average is printed before and after. (On a shared
# machine, `setsid bash -c 'echo -19 > /proc/self/autogroup; bash benchmarks/dp_scaling.sh'`
# gives the benchmark the cores first; as root.)
#   bash benchmarks/dp_scaling.sh [BUILD_DIR] [STEPS]     (default build-bench, 200 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-bench} steps=${2:-200}  # its own build: XGRAD_BUILD_BENCHMARKS stays off in build/
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXGRAD_BUILD_BENCHMARKS=ON > /dev/null
cmake --build "$build" -j 2 --target bench_dp > /dev/null
bench=$build/benchmarks/bench_dp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 XGRAD_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpi=(mpirun --bind-to core --map-by core)
field() { sed -n "s/\(^\|.* \)$1=\([^ ]*\).*/\2/p" <<< "$2"; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  ($(nproc) cores)"
# The throughput ratio: 1 rank and 2 ranks (default options) alternately, REPEAT times each; the
# best run of each counts (the one least disturbed by other processes).
repeat=${REPEAT:-3}
best() { local b=""; for l in "$@"; do [ -z "$b" ] || (( $(echo "$(field samples_per_s "$l") > $(field samples_per_s "$b")" | bc) )) && b=$l; done; echo "$b"; }
ones=() twos=()
for r in $(seq 1 "$repeat"); do
  ones+=("$("$bench" --steps "$steps")")
  echo "1 rank (run $r):                 ${ones[-1]}"
  twos+=("$("${mpi[@]}" -np 2 "$bench" --steps "$steps")")
  echo "2 ranks, default (run $r):       ${twos[-1]}"
done
one=$(best "${ones[@]}") two=$(best "${twos[@]}")
# The machine's own ceiling: two independent one-rank runs at once, one per core (no
# communication at all): what two cores give when both compute.
taskset -c 0 "$bench" --steps "$steps" > "$build/indep0.txt" &
indep1=$(taskset -c 1 "$bench" --steps "$steps")
wait
indep0=$(cat "$build/indep0.txt")
echo "2 independent 1-rank runs:      $indep0"
echo "                                $indep1"
split=$("${mpi[@]}" -np 2 "$bench" --steps "$steps" --split-wait)
echo "2 ranks, 1 MiB, split wait:     $split"
splitnone=$("${mpi[@]}" -np 2 "$bench" --steps "$steps" --split-wait --bucket-kb 1048576 --no-overlap)
echo "2 ranks, no overlap, split:     $splitnone"
small=$("${mpi[@]}" -np 2 "$bench" --steps "$steps" --bucket-kb 64)
echo "2 ranks, 64 KiB buckets:        $small"
none=$("${mpi[@]}" -np 2 "$bench" --steps "$steps" --bucket-kb 1048576 --no-overlap)
echo "2 ranks, one bucket, no overlap: $none"
zero2=$("${mpi[@]}" -np 2 "$bench" --steps "$steps" --bucket-kb 64 --zero)
echo "2 ranks, ZeRO-1:                $zero2"
zero4=$(mpirun --oversubscribe -np 4 "$bench" --steps 5 --warmup 1 --zero)
echo "4 ranks, ZeRO-1 (oversubscribed: memory only): $zero4"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
speedup=$(echo "$(field samples_per_s "$two") / $(field samples_per_s "$one")" | bc -l)
ceiling=$(echo "($(field samples_per_s "$indep0") + $(field samples_per_s "$indep1")) / $(field samples_per_s "$one")" | bc -l)
printf 'throughput, 2 ranks / 1 rank (same per-rank batch, best of %s each): %.0f / %.0f samples/s = %.2fx (goal >= 1.8x); two independent processes: %.2fx (the machine'"'"'s ceiling)\n' \
  "$repeat" "$(field samples_per_s "$two")" "$(field samples_per_s "$one")" "$speedup" "$ceiling"
for name in two small none zero2; do
  line=${!name}
  printf '  %-6s step %6.2f ms, waiting for communication %6.3f ms = %5.1f%% of the step, %s buckets, %s bytes sent per rank per step\n' \
    "$name" "$(field step_ms "$line")" "$(field wait_ms "$line")" "$(echo "100 * $(field wait_fraction "$line")" | bc -l)" \
    "$(field buckets "$line")" "$(field bytes_per_step "$line")"
done
for name in split splitnone; do
  line=${!name}
  printf '  %-9s (a barrier before the reduction wait): waiting for the slowest rank %6.3f ms, then for communication %6.3f ms (%4.1f%% of the step)\n' \
    "$name" "$(field skew_ms "$line")" "$(field wait_ms "$line")" "$(echo "100 * $(field wait_fraction "$line")" | bc -l)"
done
full=$(field full_state_bytes "$one")
for name in one zero2 zero4; do
  line=${!name}
  printf '  optimizer state per rank, %s ranks: %s bytes (%.1f%% of %s)\n' "$(field ranks "$line")" \
    "$(field zero_state_bytes "$line")" "$(echo "100 * $(field zero_state_bytes "$line") / $full" | bc -l)" "$full"
done
