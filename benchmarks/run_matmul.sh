#!/usr/bin/env bash
# Builds bench_matmul (Release, build-bench/) and prints xgrad vs raw cblas_sgemm medians.
#
# usage: benchmarks/run_matmul.sh [--json FILE] [extra Google Benchmark flags...]
#   --json FILE   keep the full results (aggregates) as JSON in FILE
#   XGRAD_THREADS=<n> in the environment sets the OpenBLAS thread count (default 1).
# Absolute times drift between runs; compare the ratios of one run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-bench"

json=""
if [[ "${1:-}" == "--json" ]]; then
  [[ $# -ge 2 ]] || { echo "run_matmul.sh: --json needs a file name" >&2; exit 2; }
  json=$2
  shift 2
fi

gen=()
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DXGRAD_BUILD_BENCHMARKS=ON -DXGRAD_BUILD_TESTS=OFF -DXGRAD_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target bench_matmul

args=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_color=false)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# The table is read from the JSON output (full precision); it goes to FILE with --json.
out=${json:-$tmp}
args+=("--benchmark_out=$out" --benchmark_out_format=json)

echo "XGRAD_THREADS=${XGRAD_THREADS:-1}"
"$build/benchmarks/bench_matmul" "${args[@]}" "$@"

# Google Benchmark's JSON has one field per line:
#   "name": "BM_xgrad_matmul/64/real_time_median",  ...  "real_time": 2.93e+00,
#   "cpu_time": ...,  "time_unit": "us",
awk '
  function to_us(v, unit) {
    if (unit == "ns") return v / 1000;
    if (unit == "ms") return v * 1000;
    if (unit == "s") return v * 1e6;
    return v;
  }
  function strval(line) { sub(/^[^:]*: *"/, "", line); sub(/".*$/, "", line); return line; }
  function numval(line) { sub(/^[^:]*: */, "", line); sub(/,.*$/, "", line); return line + 0; }
  /^ *"name":/ { name = strval($0); key = ""; if (name ~ /_median$/) { split(name, p, "/");
                 key = p[1] "/" p[2]; ns[p[2]] = 1; } }
  /^ *"real_time":/ { rt = numval($0); }
  /^ *"(xgrad_us|cblas_us|ratio)":/ {  # BM_matmul_vs_cblas_same_buffers counters
    if (name ~ /same_buffers\/[0-9]+\/manual_time_median$/) {
      split(name, p, "/"); field = $0; sub(/^ *"/, "", field); sub(/".*$/, "", field);
      same[p[2], field] = numval($0); same_n[p[2]] = 1;
    }
  }
  /^ *"time_unit":/ { if (key != "") t[key] = to_us(rt, strval($0)); }
  function row(label, n, x, c) {
    if (!((x "/" n) in t) || !((c "/" n) in t)) return;
    printf "%-16s %6d %14.2f %14.2f %8.3f\n", label, n, t[x "/" n], t[c "/" n],
           t[x "/" n] / t[c "/" n];
  }
  END {
    count = 0;
    for (n in ns) sizes[++count] = n + 0;
    for (i = 2; i <= count; i++)
      for (j = i; j > 1 && sizes[j - 1] > sizes[j]; j--) {
        s = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = s;
      }
    print "";
    print "median wall time in microseconds, ratio = xgrad / cblas (1.000 = no overhead)";
    print "fwd+bwd rows compare with the same 3 GEMMs in raw cblas (BM_cblas_sgemm_fwd_bwd)";
    printf "%-16s %6s %14s %14s %8s\n", "case", "n", "xgrad", "cblas", "ratio";
    for (i = 1; i <= count; i++)
      row("matmul forward", sizes[i], "BM_xgrad_matmul", "BM_cblas_sgemm");
    for (i = 1; i <= count; i++)
      row("matmul fwd+bwd", sizes[i], "BM_xgrad_matmul_fwd_bwd", "BM_cblas_sgemm_fwd_bwd");
    for (i = 1; i <= count; i++)
      row("linear fwd+bwd", sizes[i], "BM_xgrad_linear_fwd_bwd", "BM_cblas_sgemm_fwd_bwd");
    print "";
    print "matmul forward, xgrad and cblas alternating on the same buffers (medians of rounds):";
    for (i = 1; i <= count; i++)
      if (sizes[i] in same_n)
        printf "%-16s %6d %14.2f %14.2f %8.3f\n", "same buffers", sizes[i],
               same[sizes[i], "xgrad_us"], same[sizes[i], "cblas_us"], same[sizes[i], "ratio"];
  }' "$out"
