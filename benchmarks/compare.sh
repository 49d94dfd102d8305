#!/usr/bin/env bash
# compare.sh — xgrad vs PyTorch 1.13 (Python, and libtorch's C++ API when built) on the
# "Performance" issue's workloads, in one run.
#
# usage: benchmarks/compare.sh [--reps R] [--min-time S] [--threads "1 2"] [--rss-steps N]
#                              [--out DIR] [--no-build]
#   --reps R        repetitions per case, both sides (default 15); the median is compared
#   --min-time S    each repetition runs >= S seconds of back-to-back iterations (default 0.1)
#   --threads LIST  thread counts to run (default "1 2")
#   --rss-steps N   training steps in each peak-RSS driver run (default 30)
#   --out DIR       keep every raw JSON result there (default: a fresh build-bench/compare-<time>)
#   --no-build      do not (re)build; use the binaries in build-bench/
#   --no-libtorch   skip the libtorch C++ column (default: built and run when CMake finds libtorch,
#                   Debian's libtorch-dev; scripts/install-bench-deps.sh installs it)
# Environment: TORCH_PYTHON (default /usr/bin/python3, Debian's python3-torch);
#   MHA_TARGET: override the per-config ratio targets (tiny 0.10, small 0.50, mid 0.80, large 0.95).
#
# What it does:
#   1. configures and builds bench_mha, bench_ops, train_step_rss (Release, build-bench/,
#      -DXGRAD_BUILD_BENCHMARKS=ON, tests and examples off);
#   2. for each thread count, for each workload in turn (tiny, small, mid, raw cblas
#      references, large, training step), runs the xgrad case (Google Benchmark JSON via
#      --benchmark_out) and then the same workload in PyTorch (benchmarks/torch_mha.py),
#      and the libtorch C++ side (benchmarks/libtorch_mha.cpp: torch::nn::MultiheadAttention,
#      the same workload without Python's per-call overhead) when available,
#      so drift on a shared machine hits every side alike;
#      (PyTorch with more than one thread runs twice, default and OMP_WAIT_POLICY=PASSIVE; the
#      table uses the faster and lists both);
#   3. runs the peak-RSS drivers (train_step_rss and torch_mha.py --rss) as separate processes;
#   4. prints the table. ratio = xgrad median / torch median (< 1 = xgrad faster); "C++ ratio"
#      = xgrad median / libtorch median. Every time in it is wall clock (medians). Item 3 (large
#      against raw single-thread cblas_sgemm) comes from one extra run of the two with their
#      repetitions interleaved (--benchmark_enable_random_interleaving), so a slow minute
#      slows both sides instead of only one. Likewise the thread-scaling ratio is printed twice:
#      from the separate 1- and N-thread passes (minutes apart) and from one extra run of large
#      at N threads and at 1 with their repetitions interleaved (BM_mha_at_threads).
# Never part of the test suite. Absolute times drift between runs: compare ratios of one run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-bench"
py=${TORCH_PYTHON:-/usr/bin/python3}
reps=15
min_time=0.1
threads_list="1 2"
rss_steps=30
out=""
do_build=1
use_libtorch=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --min-time) min_time=$2; shift 2 ;;
    --threads) threads_list=$2; shift 2 ;;
    --rss-steps) rss_steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --no-libtorch) use_libtorch=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ $do_build == 1 ]]; then
  gen=()
  if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DXGRAD_BUILD_BENCHMARKS=ON -DXGRAD_BUILD_TESTS=OFF -DXGRAD_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" --target bench_mha bench_ops train_step_rss
  if [[ $use_libtorch == 1 ]]; then  # a target only when CMake found libtorch
    cmake --build "$build" --target libtorch_mha >"$build/libtorch_mha-build.log" 2>&1 ||
      echo "compare.sh: no libtorch_mha (libtorch-dev not found, or see $build/libtorch_mha-build.log); no C++ column" >&2
  fi
fi
libtorch_bin="$build/benchmarks/libtorch_mha"
[[ $use_libtorch == 1 && -x $libtorch_bin ]] || use_libtorch=0
bench="$build/benchmarks/bench_mha"
rss_bin="$build/benchmarks/train_step_rss"
[[ -x $bench && -x $rss_bin ]] || { echo "compare.sh: $bench or $rss_bin missing (build first)" >&2; exit 2; }

out=${out:-"$build/compare-$(date +%Y%m%d-%H%M%S)"}
mkdir -p "$out"

have_torch=1
torch_note=""
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  have_torch=0
  torch_note="NOTE: $py cannot import torch (install Debian's python3-torch); showing the xgrad side only."
  echo "$torch_note" >&2
fi

# Machine and load, recorded with the results.
{
  echo "date: $(date -Is)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
  echo "openblas: $(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || echo unknown)"
  if [[ $have_torch == 1 ]]; then echo "torch: $("$py" -c 'import torch; print(torch.__version__)')"; fi
  echo "uptime before: $(uptime)"
} >"$out/machine.txt"

gb_args=(--benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true
         --benchmark_min_time="$min_time" --benchmark_min_warmup_time=0.2 --benchmark_format=console
         --benchmark_out_format=json --benchmark_color=false)
torch_args=(--reps "$reps" --min-time "$min_time" --warmup 0.3)

run_xgrad() {  # threads, tag, filter
  echo "  xgrad $2 (threads $1)" >&2
  XGRAD_THREADS=$1 "$bench" "${gb_args[@]}" --benchmark_filter="$3" \
    --benchmark_out="$out/xgrad_t$1_$2.json" >"$out/xgrad_t$1_$2.log" 2>&1 ||
    echo "compare.sh: xgrad $2 (threads $1) failed; see $out/xgrad_t$1_$2.log" >&2
}
run_interleaved() {  # threads, output stem, what, filter: one process, the repetitions interleaved
  echo "  xgrad $3, interleaved (threads $1)" >&2
  XGRAD_THREADS=$1 "$bench" "${gb_args[@]}" --benchmark_enable_random_interleaving=true --benchmark_filter="$4" \
    --benchmark_out="$out/$2.json" >"$out/$2.log" 2>&1 ||
    echo "compare.sh: xgrad $3 (threads $1) failed; see $out/$2.log" >&2
}
run_torch() {  # threads, tag, torch_mha.py args...
  local t=$1 tag=$2
  shift 2
  [[ $have_torch == 1 ]] || return 0
  echo "  torch $tag (threads $t)" >&2
  "$py" "$root/benchmarks/torch_mha.py" --threads "$t" "${torch_args[@]}" "$@" \
    >"$out/torch_t${t}_$tag.json" 2>"$out/torch_t${t}_$tag.log" ||
    echo "compare.sh: torch $tag (threads $t) failed; see $out/torch_t${t}_$tag.log" >&2
  # With more than one thread, torch's OpenMP workers spin after each parallel region while
  # OpenBLAS's own threads want the same cores (2n threads on n cores): on this machine the
  # default can be 10-40x slower than OMP_WAIT_POLICY=PASSIVE for small/mid. Both are run;
  # the table compares against the faster one (the stronger baseline) and says which.
  if [[ $t != 1 ]]; then
    echo "  torch $tag (threads $t, OMP_WAIT_POLICY=PASSIVE)" >&2
    OMP_WAIT_POLICY=PASSIVE "$py" "$root/benchmarks/torch_mha.py" --threads "$t" "${torch_args[@]}" "$@" \
      >"$out/torch_t${t}_$tag-passive.json" 2>"$out/torch_t${t}_$tag-passive.log" ||
      echo "compare.sh: torch $tag (threads $t, passive) failed; see $out/torch_t${t}_$tag-passive.log" >&2
  fi
}

run_libtorch() {  # threads, config
  [[ $use_libtorch == 1 ]] || return 0
  echo "  libtorch $2 (threads $1)" >&2
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=$1 "$libtorch_bin" --threads "$1" --configs "$2" --reps "$reps" \
    --min-time "$min_time" --warmup 0.3 >"$out/libtorch_t$1_$2.json" 2>"$out/libtorch_t$1_$2.log" ||
    echo "compare.sh: libtorch $2 (threads $1) failed; see $out/libtorch_t$1_$2.log" >&2
}

for t in $threads_list; do
  echo "threads $t:" >&2
  for cfg in tiny small mid; do
    run_xgrad "$t" "$cfg" "^BM_mha/$cfg/"
    run_torch "$t" "$cfg" --configs "$cfg"
    run_libtorch "$t" "$cfg"
  done
  run_xgrad "$t" cblas "^BM_cblas_"
  run_xgrad "$t" large "^BM_mha/large/"
  # item 3 (large against its 1-thread sgemm reference) and the thread scaling (large at t
  # threads against 1): each pair in one process (item3_*: outside the xgrad_t* files, whose
  # BM_mha/large medians are the passes')
  if [[ $t == 1 ]]; then
    run_interleaved 1 item3_xgrad_t1 "item 3: large and the sgemm reference" '^BM_mha/large/|^BM_cblas_sgemm_ref/threads:1'
  else
    run_interleaved "$t" "xgrad_t${t}_scaling" "large at $t threads and at 1" "^BM_mha_at_threads/large/threads:(1|$t)/"
  fi
  run_xgrad "$t" large_mask "^BM_mha_bool_mask/large/"
  run_torch "$t" large --configs large
  run_libtorch "$t" large
  run_xgrad "$t" train "^BM_train_step_reverse"
  run_torch "$t" train --configs "" --train
done

echo "peak RSS drivers ($rss_steps steps, 1 thread):" >&2
"$rss_bin" --steps "$rss_steps" --threads 1 >"$out/rss_xgrad.json"
if [[ $have_torch == 1 ]]; then
  "$py" "$root/benchmarks/torch_mha.py" --threads 1 --rss "$rss_steps" >"$out/rss_torch.json"
fi
echo "uptime after: $(uptime)" >>"$out/machine.txt"

# --- table (stdlib-only Python; any python3 works) ---------------------------------------
table_py=$(command -v python3 || echo "$py")
"$table_py" - "$out" "$threads_list" "${MHA_TARGET:-0}" "$torch_note" <<'EOF' | tee "$out/table.txt"
import glob, json, os, sys

out, threads_list, mha_target, note = sys.argv[1], sys.argv[2].split(), float(sys.argv[3]), sys.argv[4]
CFG = {"tiny": (1, 8, 16, 2), "small": (8, 32, 64, 4), "mid": (8, 64, 128, 8), "large": (4, 512, 512, 8)}

def flops(B, T, E):  # GEMM FLOPs of MHA fwd+bwd: 24 B T E^2 + 12 B T^2 E
    return 24.0 * B * T * E * E + 12.0 * B * T * T * E

def panel_stride(n):  # ops/detail.hpp
    return (n + 15) // 16 * 16 + 16

def kept_probabilities(B, T, H, itemsize=4, block=64):
    # ops/attention.cpp keep_probabilities (KeptLayout, causal): the forward keeps each row
    # block's probabilities, rows [r0, r0 + 64) over keys [0, min(T, r0 + 64)) at row stride
    # panel_stride(keys), when they take at most 32 MiB; above that the backward recomputes them.
    per_head = sum((min(T, r0 + block) - r0) * panel_stride(min(T, r0 + block)) for r0 in range(0, T, block))
    return B * H * per_head * itemsize <= 32 << 20

def performed_flops(B, T, E, H, block=64):
    # xgrad's causal attention skips key blocks wholly in the future: query rows [r0, r0 + 64)
    # compute keys [0, min(T, r0 + 64)) only (ops/attention.cpp); per head and row block it runs
    # GEMMs of 2 r c D each: 2 forward and 4 backward, plus the recomputed scores (a 7th) when
    # the probabilities were not kept.
    gemms = 6 if kept_probabilities(B, T, H) else 7
    rc = sum((min(T, r0 + block) - r0) * min(T, r0 + block) for r0 in range(0, T, block))
    return 24.0 * B * T * E * E + 2.0 * gemms * B * E * rc, gemms

def verdict(met):
    return "met" if met else "NOT met"

SCALING_TARGET = 1.7  # large at n threads against 1

def to_ms(v, unit):
    return v * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

xg = {}  # (threads, run_name) -> median ms
for path in glob.glob(os.path.join(out, "xgrad_t*_*.json")):
    t = os.path.basename(path).split("_")[1][1:]
    try:
        data = json.load(open(path))
    except (OSError, ValueError):
        continue
    for b in data.get("benchmarks", []):
        if b.get("aggregate_name") == "median":
            name = b["run_name"].replace("/real_time", "")
            xg[(t, name)] = to_ms(b["real_time"], b["time_unit"])

tc, tc_all = {}, {}  # (threads, name) -> best median ms; -> {variant: median ms}
for path in sorted(glob.glob(os.path.join(out, "torch_t*_*.json"))):
    t = os.path.basename(path).split("_")[1][1:]
    variant = "OMP_WAIT_POLICY=PASSIVE" if path.endswith("-passive.json") else "default"
    try:
        data = json.load(open(path))
    except (OSError, ValueError):
        continue
    for r in data.get("results", []):
        key = (t, r["name"].replace("mha/", "BM_mha/").replace("train_step_reverse", "BM_train_step_reverse"))
        tc_all.setdefault(key, {})[variant] = r["median_ms"]
        tc[key] = min(tc.get(key, float("inf")), r["median_ms"])

lt = {}  # (threads, name) -> libtorch median ms
for path in sorted(glob.glob(os.path.join(out, "libtorch_t*_*.json"))):
    t = os.path.basename(path).split("_")[1][1:]
    try:
        data = json.load(open(path))
    except (OSError, ValueError):
        continue
    for r in data.get("results", []):
        lt[(t, r["name"].replace("mha/", "BM_mha/"))] = r["median_ms"]

def f(v, spec):  # "-" for a missing value, padded to the field width of spec
    return format(v, spec) if v is not None else "-".rjust(int(spec.split(".")[0]))

print()
if note:
    print(note)
try:
    machine = open(os.path.join(out, "machine.txt")).read()
    load1 = float(machine.split("load average:")[1].split(",")[0])
    if load1 > 0.5 * os.cpu_count():
        print(f"WARNING: load average {load1:.2f} on {os.cpu_count()} cores when the run started: other work "
              "shared the CPUs; absolute times (and the 2-thread rows most) are unreliable.")
except (OSError, IndexError, ValueError):
    pass
print("MultiHeadAttention self-attention, causal, need_weights off, forward+backward (median ms)")
print("ratio = xgrad / torch (Python) (< 1: xgrad faster); C++ ratio = xgrad / libtorch C++ (torch::nn::MultiheadAttention);")
print("all wall-clock medians; GFLOP/s from 24BTE^2 + 12BT^2E GEMM FLOPs")
hdr = (f"{'config':<7}{'B':>3}{'T':>5}{'E':>5}{'H':>3}{'thr':>4}{'xgrad ms':>11}{'torch ms':>11}{'ratio':>8}{'target':>8}"
       f"{'met?':>6}{'C++ ms':>11}{'C++ ratio':>10}{'xgrad GF/s':>12}{'torch GF/s':>12}")
print(hdr)
print("-" * len(hdr))
for t in threads_list:
    for cfg, (B, T, E, H) in CFG.items():
        x, p = xg.get((t, f"BM_mha/{cfg}")), tc.get((t, f"BM_mha/{cfg}"))
        c = lt.get((t, f"BM_mha/{cfg}"))
        ratio = x / p if x and p else None
        cratio = x / c if x and c else None
        target = mha_target if mha_target > 0 else {"tiny": 0.10, "small": 0.50, "mid": 0.80, "large": 0.95}[cfg]
        met = "-" if ratio is None else ("yes" if ratio <= target else "NO")
        gx = flops(B, T, E) * 1e-6 / x if x else None
        gp = flops(B, T, E) * 1e-6 / p if p else None
        print(f"{cfg:<7}{B:>3}{T:>5}{E:>5}{H:>3}{t:>4}{f(x, '11.3f')}{f(p, '11.3f')}{f(ratio, '8.2f')}"
              f"{'<=' + format(target, '.2f'):>8}{met:>6}{f(c, '11.3f')}{f(cratio, '10.2f')}{f(gx, '12.1f')}{f(gp, '12.1f')}")

multi = sorted({k for k, v in tc_all.items() if len(v) > 1})
if multi:
    print("torch with > 1 thread: the faster of default and OMP_WAIT_POLICY=PASSIVE (median ms):")
    for k in multi:
        v = tc_all[k]
        print(f"  {k[1].replace('BM_', ''):<22} threads {k[0]}: " +
              ", ".join(f"{name} {ms:.3f}" for name, ms in sorted(v.items())))

print()
B, T, E, H = CFG["large"]
fl = flops(B, T, E)
x1 = xg.get(("1", "BM_mha/large"))
ref = xg.get(("1", "BM_cblas_sgemm_ref/threads:1"))
item3 = {}  # the interleaved run's medians, when it ran: item 3 is read from it
try:
    for b in json.load(open(os.path.join(out, "item3_xgrad_t1.json"))).get("benchmarks", []):
        if b.get("aggregate_name") == "median":
            item3[b["run_name"].replace("/real_time", "")] = to_ms(b["real_time"], b["time_unit"])
except (OSError, ValueError):
    pass
interleaved = "BM_mha/large" in item3 and "BM_cblas_sgemm_ref/threads:1" in item3
x3, ref3 = (item3["BM_mha/large"], item3["BM_cblas_sgemm_ref/threads:1"]) if interleaved else (x1, ref)
floor = xg.get(("1", "BM_cblas_mha_gemms/large"))
if x3 and ref3:
    gx = fl * 1e-6 / x3
    gref = 2.0 * 2048 * 1536 * 512 * 1e-6 / ref3
    pct = 100 * gx / gref
    pf, gemms = performed_flops(B, T, E, H)
    gpf = pf * 1e-6 / x3
    ppf = 100 * gpf / gref
    print(f"large, 1 thread, raw cblas_sgemm (M2048 N1536 K512, 1 thread) {gref:.1f} GFLOP/s"
          f"{', repetitions interleaved with large (' + format(x3, '.1f') + ' ms there)' if interleaved else ''}:")
    print(f"  xgrad on the GEMM FLOPs it performs ({pf * 1e-9:.2f} GFLOP: causal future blocks skipped,"
          f" {gemms} GEMMs per head and row block, the probabilities "
          f"{'kept' if gemms == 6 else 'recomputed in the backward'}) {gpf:.1f} GFLOP/s = {ppf:.0f}%"
          f" (target >= 90%: {verdict(ppf >= 90)})")
    print(f"  counted dense as PyTorch performs them ({fl * 1e-9:.2f} GFLOP): {gx:.1f} GFLOP/s = {pct:.0f}%")
    if floor:
        gfl = fl * 1e-6 / floor
        print(f"  the layer's GEMMs, dense, in raw cblas (no softmax/bias/copies): {floor:.1f} ms, {gfl:.1f}"
              f" GFLOP/s; xgrad takes {(x1 or x3) / floor:.2f}x that time")
for t in threads_list:
    xm, xc = xg.get((t, "BM_mha_bool_mask/large")), xg.get((t, "BM_mha/large"))
    if xm and xc:
        print(f"large, {t} thread(s), causality as a bool attn_mask instead of is_causal: {xm:.1f} ms"
              f" vs {xc:.1f} ms ({xm / xc:.2f}x; the op detects the causal mask)")
for t in threads_list:
    if t == "1":
        continue
    ref_t = xg.get((t, f"BM_cblas_sgemm_ref/threads:{t}"))
    if ref_t:
        print(f"raw cblas_sgemm at {t} threads: {2.0 * 2048 * 1536 * 512 * 1e-6 / ref_t:.1f} GFLOP/s")
    xt, pt = xg.get((t, "BM_mha/large")), tc.get((t, "BM_mha/large"))
    if x1 and xt:
        s = x1 / xt
        line = (f"large, {t} threads vs 1 (the two passes, minutes apart): xgrad speedup {s:.2f}x"
                f" (target >= {SCALING_TARGET}x: {verdict(s >= SCALING_TARGET)})")
        p1 = tc.get(("1", "BM_mha/large"))
        if p1 and pt:
            line += f"; torch speedup {p1 / pt:.2f}x"
        print(line)
    a1, at = xg.get((t, "BM_mha_at_threads/large/threads:1")), xg.get((t, f"BM_mha_at_threads/large/threads:{t}"))
    if a1 and at:
        s = a1 / at
        print(f"large, {t} threads vs 1, repetitions interleaved in one process: {a1:.1f} / {at:.1f} ms ="
              f" {s:.2f}x (target >= {SCALING_TARGET}x: {verdict(s >= SCALING_TARGET)})")

print()
print("Training step of the reverse example's default model (forward, backward, clip, AdamW)")
for t in threads_list:
    x, p = xg.get((t, "BM_train_step_reverse")), tc.get((t, "BM_train_step_reverse"))
    if x is None:
        continue
    line = f"  threads {t}: xgrad {x:.2f} ms/step (padding skipped, the example's default: less work than torch's step)"
    if p:
        r = x / p
        line += f", torch {p:.2f} ms/step, ratio {r:.2f} (target <= 0.3: {verdict(r <= 0.3)})"
    d = xg.get((t, "BM_train_step_reverse_dense"))
    if d is not None:
        line += f"; every position (--dense, as torch): xgrad {d:.2f} ms/step" + (f", ratio {d / p:.2f}" if p else "")
    print(line)

def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None

rx, rp = load(os.path.join(out, "rss_xgrad.json")), load(os.path.join(out, "rss_torch.json"))
if rx:
    line = (f"  peak RSS ({rx['steps']} steps, separate process): xgrad {rx['peak_rss_kb'] / 1024:.1f} MiB"
            f" (before the model: {rx['baseline_rss_kb'] / 1024:.1f} MiB)")
    if rp and "peak_rss_kb" in rp:
        r = rx["peak_rss_kb"] / rp["peak_rss_kb"]
        line += (f", torch {rp['peak_rss_kb'] / 1024:.1f} MiB (after import torch: {rp['baseline_rss_kb'] / 1024:.1f} MiB),"
                 f" ratio {r:.2f} (target <= 0.5: {verdict(r <= 0.5)})")
        dx, dp = rx["peak_rss_kb"] - rx["baseline_rss_kb"], rp["peak_rss_kb"] - rp["baseline_rss_kb"]
        if dp > 0:
            line += f"\n    growth above baseline: xgrad {dx / 1024:.1f} MiB, torch {dp / 1024:.1f} MiB, ratio {dx / dp:.2f}"
    print(line)
print()
print(f"raw results: {out}")
EOF
cat "$out/machine.txt"
