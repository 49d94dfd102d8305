#!/usr/bin/env bash
# Installs the Debian dependencies, builds xgrad in build/ (Release) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j 2
cd build && ctest --output-on-failure -j 1
