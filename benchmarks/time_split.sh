#!/usr/bin/env bash
# time_split.sh — where a bench_mha benchmark's time goes: GEMM kernels, packing, softmax,
# copies (issue 18, item 3 asks for this split before and after each change).
#
# usage: benchmarks/time_split.sh [--filter REGEX] [--min-time S] [--threads N] [--freq HZ]
#   --filter    bench_mha benchmark (default '^BM_mha/large/')
#   --min-time  seconds of back-to-back iterations sampled (default 5)
#   --threads   XGRAD_THREADS (default 1)
#   --freq      perf sampling frequency (default 4000)
# Environment: LD_LIBRARY_PATH as usual (to sample another build's libxgrad.so against the same
# benchmark binary).
#
# Runs `perf record` (Debian's linux-perf) on build-bench/benchmarks/bench_mha, groups the
# samples of every thread by symbol into the parts below, leaves out the benchmark's setup
# (randn and the libm calls behind it) and scales each part to the benchmark's own median time
# per iteration. A sampling profile: parts under ~1% of the total are noise; compare runs of
# the same length. With --threads above 1 the samples of every thread are CPU time: the parts
# are then shares of the CPU time, and the ms column splits the wall-clock median by them.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench="$root/build-bench/benchmarks/bench_mha"
filter='^BM_mha/large/'
min_time=5
threads=1
freq=4000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --filter) filter=$2; shift 2 ;;
    --min-time) min_time=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --freq) freq=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "time_split.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "time_split.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
[[ -x $bench ]] || { echo "time_split.sh: $bench missing (build with -DXGRAD_BUILD_BENCHMARKS=ON)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
XGRAD_THREADS=$threads perf record -q -F "$freq" -o "$tmp/perf.data" "$bench" --benchmark_filter="$filter" \
  --benchmark_min_time="$min_time" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_format=csv >"$tmp/bench.csv" 2>"$tmp/perf.log" ||
  { cat "$tmp/perf.log" >&2; exit 1; }
median=$(awk -F, '/_median"/ { print $3; exit }' "$tmp/bench.csv")
unit=$(awk -F, '/_median"/ { print $5; exit }' "$tmp/bench.csv" | tr -d '"')
[[ -n $median ]] || { echo "time_split.sh: no benchmark matched '$filter'" >&2; exit 2; }

echo "$(awk -F, '/_median"/ { gsub(/"/, "", $1); print $1; exit }' "$tmp/bench.csv"): median $median $unit" \
  "per iteration, XGRAD_THREADS=$threads, $(lscpu | sed -n 's/^Model name: *//p')"
perf report -i "$tmp/perf.data" --no-children --sort symbol -F sample,symbol --stdio 2>/dev/null |
  awk -v total_time="$median" -v unit="$unit" '
    /^#/ || NF < 2 { next }
    {
      n = $1; sym = $0
      if (sym ~ /\[k\]/) part = "kernel (scheduler, page faults, kernel copies)"
      else if (sym ~ /sgemm_kernel/) part = "OpenBLAS GEMM kernel"
      else if (sym ~ /sgemm_(it|on|ot|in)copy/) part = "OpenBLAS packing"
      else if (sym ~ /sgemm_beta/) part = "OpenBLAS C scaling (beta)"
      else if (sym ~ /tiles_|run_tiles|tiled_gemm|small_gemm/) part = "xgrad GEMM tiles (head products, mid-size GEMMs)"
      else if (sym ~ /softmax_grad_rows/) part = "attention softmax backward"
      else if (sym ~ /softmax_rows|probs_rows/) part = "attention softmax forward (and recomputation)"
      else if (sym ~ /transpose/) part = "transposes (K^T, V^T, dK, dV, B^T panels)"
      else if (sym ~ /memmove|memcpy|head_rows/) part = "row copies (bias rows, Q/K/V/dO panels)"
      else if (sym ~ /randn|_cos|_log|mersenne|xgrad::uniform/) part = "SETUP"
      else if (sym ~ /binary_forward|reduce_sum|broadcast_to|memset|column_sum/) part = "elementwise and reductions (loss, bias gradients)"
      else if (sym ~ /layer_norm/) part = "layer norm"
      else if (sym ~ /gelu/) part = "GELU"
      else if (sym ~ /Adam|AdamW|SGD|grad_squared_norm|scaled_grad|clip/) part = "optimizer step and gradient clipping"
      else if (sym ~ /cross_entropy|embedding/) part = "embedding and loss"
      else part = "other"
      samples[part] += n
      if (part != "SETUP") total += n
    }
    END {
      if (total == 0) { print "0\ttime_split.sh: no samples outside the setup"; exit }
      for (p in samples) if (p != "SETUP")
        printf "%.4f\t%-52s %6.1f%% %9.2f %s\n", samples[p] / total, p, 100 * samples[p] / total,
               total_time * samples[p] / total, unit
    }' | sort -rn | cut -f2-
