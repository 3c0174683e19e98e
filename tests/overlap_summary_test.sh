#!/usr/bin/env bash
# scripts/overlap_summary.py on a hand-made trace: a reduce-scatter 600 ns long, 500 ns of it
# beside two computation kernels, and an all-gather alone (100 ns): 500 of 700 ns, 71.4%; a file
# that is not an nsys GPU trace gets one line naming it and what was expected.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
out=$("$python" "$root/scripts/overlap_summary.py" "$root/tests/data/nsys/gpu_trace.csv")
grep -qx "| 13 | 2 | 0.001 | communication |" <<<"$out" || { echo "wrong stream table: $out"; exit 1; }
grep -qx "communication 0.001 ms, beside computation 0.001 ms (71.4%)" <<<"$out" || { echo "wrong overlap: $out"; exit 1; }
bad=$(mktemp)
trap 'rm -f "$bad"' EXIT
echo "a,b" >"$bad"
if err=$("$python" "$root/scripts/overlap_summary.py" "$bad" 2>&1); then echo "a bad trace was accepted"; exit 1; fi
[ "$(wc -l <<<"$err")" = 1 ] && grep -q "has no header with 'Start (ns)'" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo "overlap_summary: ok"
