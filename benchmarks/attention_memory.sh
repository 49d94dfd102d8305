#!/usr/bin/env bash
# Peak RSS and time of one MHA forward + backward (B 1, E 512, H 8, causal, float32, 1 thread)
# per sequence length, xgrad (build-bench/benchmarks/attention_memory) and PyTorch 1.13
# (benchmarks/torch_attention_memory.py), one process per side and T, interleaved.
#
# usage: bash benchmarks/attention_memory.sh [--bin DIR] [--T "512 2048 4096 8192 16384"]
#                                            [--reps N] [--limit-gib G] [--out FILE]
#   --bin DIR     where attention_memory is (default build-bench/benchmarks; built if missing)
#   --limit-gib   address-space limit per process (ulimit -v, default 20 GiB): a side that needs
#                 more fails its allocation and is recorded as failed instead of being killed
#                 by the OOM killer (or taking the machine down with it)
#   --reps        timed iterations per process after one warm-up (default 1; 3 for T <= 2048)
# Prints a table; the JSON lines go to --out (default /tmp/attention_memory.jsonl).
set -u
cd "$(dirname "$0")/.."
BIN=build-bench/benchmarks
TS="512 2048 4096 8192 16384"
REPS=""
LIMIT_GIB=20
OUT=/tmp/attention_memory.jsonl
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --T) TS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --limit-gib) LIMIT_GIB=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
if [ ! -x "$BIN/attention_memory" ]; then
  cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DXGRAD_BUILD_BENCHMARKS=ON \
        -DXGRAD_BUILD_TESTS=OFF -DXGRAD_BUILD_EXAMPLES=OFF >/dev/null && \
    cmake --build build-bench --target attention_memory >/dev/null || exit 1
  BIN=build-bench/benchmarks
fi
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
: > "$OUT"
echo "uptime before: $(uptime)"
limit_kb=$((LIMIT_GIB * 1024 * 1024))
run() {  # run SIDE T: one JSON line into $OUT, a failure recorded as such
  local side=$1 T=$2 reps=${REPS:-$([ "$2" -le 2048 ] && echo 3 || echo 1)} line
  if [ "$side" = xgrad ]; then
    line=$( (ulimit -v $limit_kb; XGRAD_THREADS=1 "$BIN/attention_memory" --T "$T" --reps "$reps") 2>/tmp/attn_mem_err.txt)
  else
    line=$( (ulimit -v $limit_kb; OMP_NUM_THREADS=1 /usr/bin/python3 benchmarks/torch_attention_memory.py --T "$T" --reps "$reps") 2>/tmp/attn_mem_err.txt)
  fi
  local rc=$?
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    line="{\"side\": \"$side\", \"T\": $T, \"error\": \"exit $rc: $(tail -c 160 /tmp/attn_mem_err.txt | tr -d '\"\n')\"}"
  fi
  echo "$line" >> "$OUT"
}
for T in $TS; do
  run xgrad "$T"
  [ $have_torch = 1 ] && run torch "$T"
done
echo "uptime after: $(uptime)"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["T"], {})[r["side"]] = r
def cell(r, key, scale):
    if r is None: return "-"
    if "error" in r: return "failed"
    return "%.1f" % (r[key] / scale)
print("MHA fwd+bwd, B 1, E 512, H 8, causal, float32, 1 thread; peak RSS (ru_maxrss) and wall time")
print("%6s %12s %12s %8s %12s %12s %10s %10s" % ("T", "xgrad MiB", "torch MiB", "ratio", "xgrad ms", "torch ms",
                                              "xgrad us/tok", "torch us/tok"))
for T in sorted(by):
    x, t = by[T].get("xgrad"), by[T].get("torch")
    ratio = "-"
    if x and t and "error" not in x and "error" not in t:
        ratio = "%.3f" % (x["peak_rss_kb"] / t["peak_rss_kb"])
    us = lambda r: "-" if r is None else ("failed" if "error" in r else "%.1f" % (r["ms_per_token"] * 1e3))
    print("%6d %12s %12s %8s %12s %12s %10s %10s" % (T, cell(x, "peak_rss_kb", 1024), cell(t, "peak_rss_kb", 1024), ratio,
          cell(x, "median_ms", 1), cell(t, "median_ms", 1), us(x), us(t)))
for r in rows:
    if "error" in r:
        print("  %s T=%d failed: %s" % (r["side"], r["T"], r["error"]))
PY
