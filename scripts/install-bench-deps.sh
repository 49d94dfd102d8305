#!/usr/bin/env bash
# Installs the Debian packages the side-by-side benchmarks use and nothing else needs:
#   python3-torch  PyTorch 1.13 for /usr/bin/python3 (benchmarks/torch_mha.py,
#                  benchmarks/torch_attention_memory.py)
#   libtorch-dev   libtorch's C++ API and CMake package (benchmarks/libtorch_mha.cpp, the third
#                  column of benchmarks/compare.sh)
# Never needed to build or test xgrad (scripts/install-deps.sh has those); CI does not run it.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends python3-torch libtorch-dev >/dev/null
echo "install-bench-deps: done"
