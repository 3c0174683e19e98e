#!/usr/bin/env bash
# Installs trident into a scratch prefix, builds examples/ against it with find_package(trident)
# and trains a few iterations through the Trainer API.
set -euo pipefail
build_dir=$1 source_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
# Where the build found its dependencies (LibTorch, yaml-cpp, CUDA), the example looks too.
cached() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt"; }
cmake -S "$source_dir/examples" -B "$scratch/example" -G Ninja \
  -DCMAKE_PREFIX_PATH="$scratch/prefix;$(cached CMAKE_PREFIX_PATH)" -DTorch_DIR="$(cached Torch_DIR)" \
  -DCMAKE_CUDA_COMPILER="$(cached CMAKE_CUDA_COMPILER)" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" >/dev/null
cmake --build "$scratch/example" >/dev/null
"$scratch/example/train_tiny" train.iters=3 | tee "$scratch/log"
grep -q "example: iteration 3 loss" "$scratch/log"
