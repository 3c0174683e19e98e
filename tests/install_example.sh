#!/usr/bin/env bash
# Installs trident into a scratch prefix and builds every program of examples/ against the
# installed headers alone (find_package(trident), <trident/trident.h>), then runs them: train_tiny
# in one process; finetune_answers (its own samples and loss masks), custom_block (its own block)
# and hooks (a metric of its own, an early stop, its own loss) at TP 2 x PP 2 under MPIEXEC; and
# check_custom_block, the layout-equality proof of the custom block.
#   install_example.sh BUILD_DIR SOURCE_DIR [MPIEXEC]
set -euo pipefail
build_dir=$1 source_dir=$2 mpiexec=${3:-}
# A fixed folder in the build tree, so that ccache, hashing paths relative to the checkout
# (CCACHE_BASEDIR), serves the examples' compilation in any clone from its cache.
scratch=$build_dir/install-example
rm -rf "$scratch"
mkdir -p "$scratch"
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
# Where the build found its dependencies (LibTorch, yaml-cpp, CUDA), the example looks too.
cached() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt"; }
cmake -S "$source_dir/examples" -B "$scratch/example" -G Ninja \
  -DCMAKE_PREFIX_PATH="$scratch/prefix;$(cached CMAKE_PREFIX_PATH)" -DTorch_DIR="$(cached Torch_DIR)" \
  -DCMAKE_CUDA_COMPILER="$(cached CMAKE_CUDA_COMPILER)" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" >/dev/null
CCACHE_BASEDIR=$(cd "$source_dir" && pwd) CCACHE_NOHASHDIR=true cmake --build "$scratch/example" >/dev/null
bin=$scratch/example
expect() {  # expect LOG PATTERN: the run's log holds the line
  grep -q "$2" "$1" || { echo "expected '$2' in:"; cat "$1"; exit 1; }
}
"$bin/train_tiny" train.iters=3 | tee "$scratch/tiny.log"
expect "$scratch/tiny.log" "example: iteration 3 loss"
if [ -z "$mpiexec" ]; then
  echo "no MPI: the examples' TP 2 x PP 2 runs and the layout check are skipped"
  exit 0
fi
# MKL_CBWR: pip's LibTorch (MKL) rounds alike whatever the memory alignment, as the layout check's
# 1e-10 comparisons need (tests/CMakeLists.txt).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 MKL_CBWR=COMPATIBLE
launch="$mpiexec --oversubscribe -np"
layout="parallel.tensor=2 parallel.pipeline=2"
$launch 4 "$bin/finetune_answers" $layout train.metrics_file="$scratch/finetune.jsonl" 2>&1 | tee "$scratch/finetune.log"
expect "$scratch/finetune.log" "finetune_answers: the loss on held-out answers is"
$launch 4 "$bin/custom_block" $layout 2>&1 | tee "$scratch/block.log"
expect "$scratch/block.log" "iter 5/5"
$launch 4 "$bin/hooks" $layout train.checkpoint_dir="$scratch/hooks-ck" train.metrics_file="$scratch/hooks.jsonl" \
  2>&1 | tee "$scratch/hooks.log"
expect "$scratch/hooks.log" "loss_average"
expect "$scratch/hooks.log" "hooks: stopped by request_stop() after iteration 6"
expect "$scratch/hooks.log" "hooks: saved iteration 6"
expect "$scratch/hooks.jsonl" '"loss_average"'
"$bin/check_custom_block" "$bin/custom_block" "$scratch/check" "$launch" | tee "$scratch/check.log"
expect "$scratch/check.log" "every layout equals the single process"
