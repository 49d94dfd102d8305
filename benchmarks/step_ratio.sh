#!/usr/bin/env bash
# Training step of the reverse model, xgrad against PyTorch 1.13, interleaved: per round and
# CPU family, PyTorch's step (torch_mha.py --train), then xgrad's with the padding skipped
# (BM_train_step_reverse) and over every position (BM_train_step_reverse_dense), 1 thread.
# On a shared machine whose speed drifts, the round ratios (both sides minutes apart at most)
# say more than one long run of each side.
# usage: benchmarks/step_ratio.sh [ROUNDS] [REPS] [MIN_TIME]   (defaults 6, 3, 0.2)
# Needs build-bench (-DXGRAD_BUILD_BENCHMARKS=ON, bench_mha built) and /usr/bin/python3 with torch.
# Families: AVX-512 (xgrad avx512, OpenBLAS COOPERLAKE, or SKYLAKEX without AVX512-BF16), run
# only where xgrad's avx512 path runs (scripts/cpu-flags.sh), and AVX2 (xgrad avx2, OpenBLAS HASWELL, ATen avx2).
# Prints one line per round and family: times in ms, ratios in (); then per family the median
# ratio of each column, its range and how many rounds lie above 0.3.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-6} reps=${2:-3} min_time=${3:-0.2}
bench=build-bench/benchmarks/bench_mha
[[ -x $bench ]] || { echo "step_ratio.sh: $bench missing (build it first)" >&2; exit 2; }
source scripts/cpu-flags.sh  # has, xgrad_paths
families=()
for path in "${xgrad_paths[@]}"; do [[ $path == baseline ]] || families=("$path" "${families[@]}"); done  # avx512 first
[[ ${#families[@]} -gt 0 ]] || { echo "step_ratio.sh: this CPU has neither AVX-512 nor AVX2" >&2; exit 2; }
avx512_core=SKYLAKEX
has avx512_bf16 && avx512_core=COOPERLAKE  # the kernels OpenBLAS 0.3.21 picks on Zen 4/5
rounds_log=$(mktemp)
trap 'rm -f "$rounds_log"' EXIT
echo "step_ratio.sh: families ${families[*]} ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | xargs))"
for _ in $(seq "$rounds"); do
  for family in "${families[@]}"; do
    if [[ $family == avx2 ]]; then envs=(OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2); else envs=(OPENBLAS_CORETYPE=$avx512_core); fi
    torch=$(env "${envs[@]}" /usr/bin/python3 benchmarks/torch_mha.py --threads 1 --configs "" --train --reps "$reps" \
              --min-time "$min_time" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["results"][0]["median_ms"])')
    lines=$(env "${envs[@]}" XGRAD_CPU_PATH=$family XGRAD_THREADS=1 "$bench" --benchmark_filter=BM_train_step_reverse \
              --benchmark_repetitions="$reps" --benchmark_min_time="$min_time" --benchmark_report_aggregates_only=true 2>/dev/null)
    # the median of the repetitions (one repetition: its own line)
    skip=$(awk '$1 == "BM_train_step_reverse/real_time_median" || $1 == "BM_train_step_reverse/real_time" {print $2}' <<<"$lines")
    dense=$(awk '$1 == "BM_train_step_reverse_dense/real_time_median" || $1 == "BM_train_step_reverse_dense/real_time" {print $2}' <<<"$lines")
    python3 -c "import sys; t, s, d = map(float, sys.argv[2:]); print(f'{sys.argv[1]}: torch {t:.2f}  xgrad skip_padding {s:.2f} ({s / t:.3f})  dense {d:.2f} ({d / t:.3f})')" \
      "$family" "$torch" "$skip" "$dense" | tee -a "$rounds_log"
  done
done
# per family and column: the median ratio, its range, and the rounds above the issue's 0.3
python3 - "$rounds_log" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+): torch (\S+)  xgrad skip_padding \S+ \((\S+)\)  dense \S+ \((\S+)\)", line)
    if m:
        rows.setdefault(m[1], []).append((float(m[2]), float(m[3]), float(m[4])))
for family, r in rows.items():
    torch = [t for t, _, _ in r]
    print(f"{family} summary over {len(r)} rounds: torch {min(torch):.2f}-{max(torch):.2f} ms (median {statistics.median(torch):.2f})")
    for name, col in (("skip_padding", 1), ("dense", 2)):
        v = [x[col] for x in r]
        print(f"  {name}: ratio median {statistics.median(v):.3f}, {min(v):.3f}-{max(v):.3f}, above 0.3 in {sum(x > 0.3 for x in v)} of {len(v)}")
PY
