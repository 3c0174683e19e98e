"""Which operators launched the GPU kernels that took the time, from a trace written by
train.profile_iteration (TRAIN.profile_dir/rank<R>.json, Kineto's Chrome trace format):

  python3 scripts/kernel_sources.py runs/gpu/gpt1.7b_fused_profile/rank0.json [--top 12]

A kernel and the CUDA runtime or driver call that launched it share a "correlation" number; the
launch happened on a CPU thread inside nested operators ("cpu_op" events). For each of the kernels
with the most GPU time this prints where they came from: the innermost operator with its
inputs' shapes (the trace has them: trident records shapes when it profiles) and the outermost
one (in backward, the autograd node), with their share of the kernel's time. Shares are of the
kernels' time (copies and memsets, which rank<R>.txt counts too, are left out); shapes list the
tensor inputs (scalars, which have none, are left out).
"""
import argparse
import json
import sys
from collections import defaultdict


def load(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"kernel_sources: cannot read {path} as a JSON trace: {e}")
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        sys.exit(f"kernel_sources: {path} has no 'traceEvents' list (expected a trace of train.profile_iteration)")
    return [e for e in events if e.get("ph") == "X"]


def launch_sources(events):
    """correlation number -> (innermost operator, outermost operator) around its launch."""
    by_thread = defaultdict(list)  # (pid, tid) -> [(ts, order, dur, event)]
    for e in events:
        if e.get("cat") == "cpu_op":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], 0, -e["dur"], e))
        elif e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            by_thread[(e["pid"], e["tid"])].append((e["ts"], 1, 0, e))
    sources = {}
    for items in by_thread.values():
        # One thread's operators nest: sweep them in time order, keeping the open ones on a stack
        # (at equal starts the longer operator first, and operators before a launch).
        items.sort(key=lambda item: item[:3])
        open_ops = []
        for ts, is_launch, _, e in items:
            # An operator ending where the next event starts is over (timestamps may be whole
            # microseconds, so a sibling's start can equal its end).
            while open_ops and open_ops[-1]["ts"] + open_ops[-1]["dur"] <= ts:
                open_ops.pop()
            if not is_launch:
                open_ops.append(e)
            elif open_ops:
                outer = open_ops[0]["name"] if len(open_ops) > 1 else ""
                sources[e["args"]["correlation"]] = (describe(open_ops[-1]), outer)
    return sources


def describe(op):
    dims = op.get("args", {}).get("Input Dims")
    shapes = ", ".join(str(d) for d in dims if d) if isinstance(dims, list) else ""
    return f"{op['name']}({shapes})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=12, help="kernels to explain, the most GPU time first")
    args = parser.parse_args()
    events = load(args.trace)
    sources = launch_sources(events)
    kernels = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))  # name -> source -> [us, calls]
    for e in events:
        if e.get("cat") == "kernel":
            source = sources.get(e.get("args", {}).get("correlation"), ("(no operator)", ""))
            total = kernels[e["name"]][source]
            total[0] += e["dur"]
            total[1] += 1
    if not kernels:
        sys.exit(f"kernel_sources: {args.trace} has no GPU kernels (a CPU run's trace?)")
    busy = sum(us for by_source in kernels.values() for us, _ in by_source.values())
    ranked = sorted(kernels.items(), key=lambda item: -sum(us for us, _ in item[1].values()))
    for name, by_source in ranked[:args.top]:
        us = sum(t for t, _ in by_source.values())
        print(f"{us / 1e3:9.3f} ms {100 * us / busy:5.1f}%  {name[:150]}")
        for (inner, outer), (t, calls) in sorted(by_source.items(), key=lambda item: -item[1][0])[:4]:
            print(f"    {100 * t / us:5.1f}% {calls:5d} calls  {inner[:160]}" + (f"  in {outer[:80]}" if outer else ""))


if __name__ == "__main__":
    main()
