"""Prints scripts/gpu_report's side-by-side table: for each row, trident with its fused kernels,
in FP8 (precision=fp8) and with the composite path (model.fused_kernels=false), and the PyTorch peer
(scripts/pytorch_gpu_peer.py) eager and under torch.compile: tokens/s, MFU and peak allocated
memory. trident's tokens/s are the mean over its iterations after the first (and before the
last, when ROW_KERNELS_profile/ says it was profiled), each beside what the time model planned
for it where there is a plan (plan --explain: tokens/s per GPU and memory with the built-in
profile of the GPU's name, ROW_KERNELS_plan.txt, and tokens/s with the profile bench measured,
ROW_KERNELS_plan_measured.txt); the peers' MFU is trident's FLOPs per token (Megatron's formula)
at the peer's rate.

  python3 scripts/gpu_table.py DIR ROW...    (DIR holds ROW_fused.log/.jsonl/_plan.txt, ROW_fp8.*, ROW_composite.*, ROW_eager.json, ROW_compile.json)
"""
import json
import re
import sys
from pathlib import Path


def trident(directory, name):
    log, metrics = directory / f"{name}.log", directory / f"{name}.jsonl"
    if not metrics.exists():
        return None
    iterations = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()][1:]
    if (directory / f"{name}_profile").exists():
        iterations = iterations[:-1]
    if not iterations:
        return None
    peak = re.search(r"peak of ([\d.]+) GiB allocated", log.read_text()) if log.exists() else None
    tokens = sum(i["tokens_per_s"] for i in iterations) / len(iterations)
    mfu = sum(i.get("mfu", float("nan")) for i in iterations) / len(iterations)
    run = {"tokens_per_s": tokens, "mfu": mfu, "peak_gib": float(peak.group(1)) if peak else float("nan")}
    builtin, measured = planned(directory / f"{name}_plan.txt"), planned(directory / f"{name}_plan_measured.txt")
    parts = []
    if builtin["tokens"] is not None:
        parts.append(f"plan {builtin['tokens'] / 1e3:.1f} k")
    if builtin["memory"] is not None:
        parts.append(f"{builtin['memory']:.1f} GiB")
    if measured["tokens"] is not None:
        parts.append(f"measured profile {measured['tokens'] / 1e3:.1f} k")
    run["plan"] = f" ({', '.join(parts)})" if parts else ""
    return run


def planned(path):
    """plan --explain's tokens/s per GPU and memory total (GiB), each None where absent."""
    text = path.read_text() if path.exists() else ""
    tokens = re.search(r"^# ([\d.]+) tokens/s per GPU", text, re.M)
    memory = re.search(r"^total +([\d.]+) GiB", text, re.M)
    return {"tokens": float(tokens.group(1)) if tokens else None, "memory": float(memory.group(1)) if memory else None}


def peer(directory, name):
    path = directory / f"{name}.json"
    if not path.exists():
        return None
    lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def cell(run, mfu):
    if run is None:
        return "failed"
    return (f"{run['tokens_per_s'] / 1e3:.1f} k tok/s, {100 * mfu:.1f}% MFU, {run['peak_gib']:.1f} GiB"
            f"{run.get('plan', '')}")


def main():
    directory, rows = Path(sys.argv[1]), sys.argv[2:]
    print("| row | trident fused | trident fp8 | trident composite | PyTorch eager | torch.compile "
          "| fused / compile | fp8 / compile |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        fused, composite = trident(directory, f"{row}_fused"), trident(directory, f"{row}_composite")
        fp8 = trident(directory, f"{row}_fp8")
        eager, compiled = peer(directory, f"{row}_eager"), peer(directory, f"{row}_compile")
        reference = fused or composite or fp8
        flops_per_token_mfu = reference["mfu"] / reference["tokens_per_s"] if reference else float("nan")
        mfu = lambda run: run["tokens_per_s"] * flops_per_token_mfu if run else 0.0
        ratio = lambda run: f"{run['tokens_per_s'] / compiled['tokens_per_s']:.3f}" if run and compiled else "-"
        print(f"| {row} | {cell(fused, mfu(fused))} | {cell(fp8, mfu(fp8))} | {cell(composite, mfu(composite))} "
              f"| {cell(eager, mfu(eager))} | {cell(compiled, mfu(compiled))} | {ratio(fused)} | {ratio(fp8)} |")


if __name__ == "__main__":
    main()
