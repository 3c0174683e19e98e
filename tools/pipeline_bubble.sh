#!/usr/bin/env bash
# Measures the pipeline bubble on this machine: the share of an iteration the first stage spends
# waiting in point-to-point exchanges, for several micro-batch counts M, next to the theory
# (p-1)/(M+p-1) for GPipe and 1F1B and (p-1)/(vM+p-1) for interleaved 1F1B (the idle share of
# a stage when the bubble is (p-1)/M, resp. (p-1)/(vM), of the ideal time).
#
#   tools/pipeline_bubble.sh [build dir] [stages]     (defaults: build, 2)
#
# Each run trains a synthetic-data GPT for 6 iterations under mpirun; the first iteration is
# left out of the averages.
set -euo pipefail
build=${1:-build}
p=${2:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

printf "# %d stages, %s; idle = pipeline_transfer_ms / elapsed_ms on stage 0\n" "$p" "$(nproc) cores"
printf "%-18s %4s %12s %12s %12s\n" schedule M "iter(ms)" "idle(meas)" "idle(theory)"
for schedule in gpipe 1f1b interleaved_1f1b; do
  v=1
  [ "$schedule" = interleaved_1f1b ] && v=2
  for m in 2 4 8 16; do
    metrics=$scratch/$schedule-$m.jsonl
    mpirun --oversubscribe -np "$p" "$build/train" --config "$here/configs/gpt-tiny.yaml" \
      data.type=synthetic model.num_layers=8 model.hidden_size=256 model.num_attention_heads=8 \
      batch.micro_batch_size=1 batch.global_batch_size="$m" train.iters=6 train.eval_interval=0 \
      train.log_interval=100 parallel.pipeline="$p" parallel.schedule="$schedule" \
      parallel.virtual_stages=$v train.metrics_file="$metrics" >/dev/null
    awk -v s="$schedule" -v m="$m" -v p="$p" -v v="$v" '
      NR > 1 {
        match($0, /"elapsed_ms": [0-9.e+-]+/); e = substr($0, RSTART + 14, RLENGTH - 14)
        match($0, /"pipeline_transfer_ms": [0-9.e+-]+/); t = substr($0, RSTART + 24, RLENGTH - 24)
        elapsed += e; transfer += t; n++
      }
      END { printf "%-18s %4d %12.1f %12.3f %12.3f\n", s, m, elapsed / n, transfer / elapsed, (p - 1) / (v * m + p - 1) }
    ' "$metrics"
  done
done
