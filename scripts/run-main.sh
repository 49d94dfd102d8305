#!/usr/bin/env bash
# Installs the Debian dependencies, builds xgrad in build/ (Release) and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j 2 --target demo
./build/examples/demo "$@"
