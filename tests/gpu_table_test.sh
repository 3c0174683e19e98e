#!/usr/bin/env bash
# scripts/gpu_table.py on hand-made run files of one row: trident fused and fp8 (each with its first
# iteration and, having a profile folder, its last left out; fused with the time model's plan beside
# it), torch.compile's peer, and no composite or eager run (each a "failed" cell); the peer's MFU at
# trident's FLOPs per token.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for run in fused:900:0.54:51.0 fp8:1100:0.66:50.0; do
  IFS=: read -r name tokens mfu peak <<<"$run"
  printf '%s\n' '{"iteration": 1, "tokens_per_s": 10, "mfu": 0.01}' \
    "{\"iteration\": 2, \"tokens_per_s\": $tokens, \"mfu\": $mfu}" '{"iteration": 3, "tokens_per_s": 5, "mfu": 0.1}' \
    >"$dir/row_$name.jsonl"
  echo "memory on rank 0: activations beyond the states at the peak of $peak GiB allocated" >"$dir/row_$name.log"
  mkdir "$dir/row_${name}_profile"
done
printf '%s\n' '# time per iteration' 'total          1.6748 s  1 GPUs, software trident' \
  '# 875 tokens/s per GPU, 525.106 TFLOP/s per GPU by the model FLOPs' '# memory per GPU' 'total         53.1 GiB' \
  >"$dir/row_fused_plan.txt"
sed 's/^# 875 tokens/# 990 tokens/' "$dir/row_fused_plan.txt" >"$dir/row_fused_plan_measured.txt"
echo '{"row": "row", "tokens_per_s": 1000, "peak_gib": 49.3}' >"$dir/row_compile.json"
out=$("$python" "$root/scripts/gpu_table.py" "$dir" row)
expected="| row | 0.9 k tok/s, 54.0% MFU, 51.0 GiB (plan 0.9 k, 53.1 GiB, measured profile 1.0 k) | 1.1 k tok/s, 66.0% MFU, 50.0 GiB | failed | failed | 1.0 k tok/s, 60.0% MFU, 49.3 GiB | 0.900 | 1.100 |"
grep -qxF -- "$expected" <<<"$out" || { echo "expected '$expected' in: $out"; exit 1; }
grep -q "| fused / compile | fp8 / compile |$" <<<"$out" || { echo "no ratio columns in: $out"; exit 1; }
echo "gpu_table: ok"
