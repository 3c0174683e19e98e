#!/usr/bin/env bash
# scripts/kernel_sources.py on a hand-made Kineto trace: a multiply launched inside addmm inside
# linear, an add kernel launched twice (a bias add in the forward, a gradient add in backward,
# one through the driver API), and a kernel launched outside any operator; a file that is not a
# trace, not JSON, or without kernels gets one line naming it and what was expected.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
out=$("$python" "$root/scripts/kernel_sources.py" "$root/tests/data/kineto/trace.json")
expect() { grep -qxF -- "$1" <<<"$out" || { echo "missing line '$1' in: $out"; exit 1; }; }
expect "    0.060 ms  57.1%  gemm_kernel"
expect "    100.0%     1 calls  aten::addmm([32], [8, 16], [16, 32])  in aten::linear"
expect "     75.0%     1 calls  aten::add_([8, 32], [8, 32])  in autograd::engine::evaluate_function: AddBackward0"
expect "     25.0%     1 calls  aten::add_([8, 32], [32])  in aten::linear"
expect "    100.0%     1 calls  (no operator)"
[ "$(head -1 <<<"$out")" = "    0.060 ms  57.1%  gemm_kernel" ] || { echo "not the most time first: $out"; exit 1; }
bad=$(mktemp)
trap 'rm -f "$bad"' EXIT
echo '{"events": []}' >"$bad"
if err=$("$python" "$root/scripts/kernel_sources.py" "$bad" 2>&1); then echo "a bad trace was accepted"; exit 1; fi
[ "$(wc -l <<<"$err")" = 1 ] && grep -q "has no 'traceEvents' list" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo 'not json' >"$bad"
err=$("$python" "$root/scripts/kernel_sources.py" "$bad" 2>&1) && { echo "a file that is not JSON was accepted"; exit 1; }
[ "$(wc -l <<<"$err")" = 1 ] && grep -q "cannot read .* as a JSON trace" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}' >"$bad"
err=$("$python" "$root/scripts/kernel_sources.py" "$bad" 2>&1) && { echo "a trace without kernels was accepted"; exit 1; }
[ "$(wc -l <<<"$err")" = 1 ] && grep -q "has no GPU kernels" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo "kernel_sources: ok"
