#!/usr/bin/env bash
# Installs the Debian dependencies, builds xgrad in build/ (Release) and runs the main job:
# the `reverse` example (a Transformer encoder learns to reverse digit sequences) until it
# reverses all 1,000 held-out sequences exactly. Outputs go to out/reverse/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j 2 --target reverse
./build/examples/reverse --out out/reverse "$@"
