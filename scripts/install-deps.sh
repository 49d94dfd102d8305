#!/usr/bin/env bash
# Installs every Debian package xgrad needs to build, test and benchmark.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config \
  libxtensor-dev libxtensor-blas-dev xtl-dev libopenblas-dev \
  libboost-test-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev gnuplot-nox zlib1g-dev dataset-fashion-mnist fortunes libopenmpi-dev openmpi-bin graphviz clang libclang-rt-14-dev llvm libc++-14-dev libc++abi-14-dev >/dev/null
echo "install-deps: done"
