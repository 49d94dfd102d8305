#!/usr/bin/env bash
# Builds xgrad (Release) and runs the full memory soak: 10,000 training steps of a small
# Transformer encoder, VmRSS sampled every 100 steps, failing if RSS grows by more than 1%
# between step 500 (after warm-up) and the end, or if any step's graph outlives the step.
# Usage: bash scripts/soak.sh [BUILD_DIR] [extra soak arguments...]   (default build dir: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C "$build" soak > /dev/null
echo "running: $build/tests/soak --steps 10000 --warmup 500 --rss-every 100 --max-growth 1 $*"
start=$(date +%s.%N)
status=0
"$build/tests/soak" --steps 10000 --warmup 500 --rss-every 100 --max-growth 1 "$@" || status=$?
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" -v s="$status" 'BEGIN { printf "soak.sh: wall time %.1f s, exit %d\n", b - a, s }'
exit $status
