#!/usr/bin/env bash
# Data-parallel scaling of the `reverse` training step (benchmarks/bench_dp.cpp) on this machine:
# samples/s with 1 and 2 ranks at the same per-rank batch (1 thread per rank), the fraction of
# the step spent waiting for gradient communication with and without bucketing/overlap, and
# ZeRO-1's optimizer state per rank for 1, 2 and 4 ranks. Numbers are only meaningful on a
# quiet machine: the load average is printed before and after.
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
one=$("$bench" --steps "$steps")
echo "1 rank:                         $one"
two=$("${mpi[@]}" -np 2 "$bench" --steps "$steps")
echo "2 ranks, 1 MiB buckets:         $two"
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
printf 'throughput, 2 ranks / 1 rank (same per-rank batch): %.2fx (goal >= 1.8x)\n' "$speedup"
for name in two small none zero2; do
  line=${!name}
  printf '  %-6s step %6.2f ms, waiting for communication %6.3f ms = %5.1f%% of the step, %s buckets, %s bytes sent per rank per step\n' \
    "$name" "$(field step_ms "$line")" "$(field wait_ms "$line")" "$(echo "100 * $(field wait_fraction "$line")" | bc -l)" \
    "$(field buckets "$line")" "$(field bytes_per_step "$line")"
done
full=$(field full_state_bytes "$one")
for name in one zero2 zero4; do
  line=${!name}
  printf '  optimizer state per rank, %s ranks: %s bytes (%.1f%% of %s)\n' "$(field ranks "$line")" \
    "$(field zero_state_bytes "$line")" "$(echo "100 * $(field zero_state_bytes "$line") / $full" | bc -l)" "$full"
done
