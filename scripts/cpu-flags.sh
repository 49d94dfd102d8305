# Sourced by scripts/test-matrix.sh and benchmarks/step_ratio.sh: this CPU's flags (/proc/cpuinfo),
# `has FLAG...`, and xgrad_paths, the XGRAD_CPU_PATH values it can run (the features
# framework/runtime.cpp checks before it takes a path).
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true) "
has() { for f in "$@"; do [[ $cpu_flags == *" $f "* ]] || return 1; done; }
xgrad_paths=(baseline)
if has avx2 fma bmi1 bmi2; then xgrad_paths+=(avx2); fi
if has avx2 fma bmi1 bmi2 avx512f avx512bw avx512dq avx512vl avx512cd; then xgrad_paths+=(avx512); fi
