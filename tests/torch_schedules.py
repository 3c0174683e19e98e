"""trident's ZB-V and DualPipe-V generators against torch.distributed.pipelining's own
(ScheduleZBVZeroBubble, ScheduleDualPipeV): every rank's actions, in order, for 2 to 4 ranks and
several micro-batch counts, from `pipeline_bubble --actions`. DualPipe-V's overlapped forward and
backward pairs count as the forward, then the backward, the order trident runs them in.

Compares the schedules this Python's torch has; exits 77 (CTest's skipped) naming what is missing
when it has neither, or when their generators no longer take the attributes given below (a
private method: torch may change it).
By hand: TRIDENT_BINARY_DIR=build .venv/bin/python tests/torch_schedules.py
"""

import os
import subprocess
import sys
import types
from pathlib import Path

SKIP = 77

try:
    from torch.distributed.pipelining import schedules as torch_schedules
except ImportError as error:
    print(f"skipped: {sys.executable} lacks torch.distributed.pipelining ({error})")
    sys.exit(SKIP)
# trident's name of each schedule and torch's class, where this torch has it.
SCHEDULES = {}
for name, cls in (("zb-v", "ScheduleZBVZeroBubble"), ("dualpipe-v", "ScheduleDualPipeV")):
    if hasattr(torch_schedules, cls):
        SCHEDULES[name] = getattr(torch_schedules, cls)
    else:
        print(f"{name}: skipped, {sys.executable}'s torch has no {cls}")
if not SCHEDULES:
    sys.exit(SKIP)

BINARY = Path(os.environ.get("TRIDENT_BINARY_DIR") or Path(__file__).resolve().parents[1] / "build").resolve()


def torch_rows(schedule_class, ranks, micro_batches):
    """Each rank's actions as torch writes them ("3F0"), its idle slots left out."""
    # The generator reads only these attributes; building the schedule itself needs stages.
    this = types.SimpleNamespace(pp_group_size=ranks, _n_microbatches=micro_batches, num_stages=2 * ranks)
    rows = []
    for rank in range(ranks):
        actions = []
        try:
            generated = schedule_class._calculate_single_rank_operations(this, rank)
        except (AttributeError, TypeError) as error:
            print(f"skipped: {schedule_class.__name__}'s generator wants more than trident gives it ({error})")
            sys.exit(SKIP)
        for action in generated:
            if action is not None:
                actions.extend(getattr(action, "sub_actions", None) or [action])
        rows.append(",".join(repr(action) for action in actions))
    return rows


def trident_rows(schedule, ranks, micro_batches):
    command = [str(BINARY / "pipeline_bubble"), "--actions", str(ranks), "--schedules", schedule,
               "--micro-batches", str(micro_batches)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if not line.startswith("#")]


def main():
    counts = {"zb-v": lambda p: (1, p, 2 * p, 3 * p + 1),  # ZB-V is cut down below 2p - 1
              "dualpipe-v": lambda p: (2 * p, 2 * p + 1, 4 * p)}  # DualPipe-V needs M >= 2p
    cases = [(name, ranks, m) for name in SCHEDULES for ranks in (2, 3, 4) for m in counts[name](ranks)]
    failed = 0
    for schedule, ranks, m in cases:
        theirs, ours = torch_rows(SCHEDULES[schedule], ranks, m), trident_rows(schedule, ranks, m)
        same = theirs == ours
        print(f"{schedule} p={ranks} M={m}: {'equal' if same else 'DIFFERENT'}")
        if not same:
            failed += 1
            for rank in range(ranks):
                print(f"  rank {rank} torch   {theirs[rank] if rank < len(theirs) else '(none)'}")
                print(f"  rank {rank} trident {ours[rank] if rank < len(ours) else '(none)'}")
    if failed:
        sys.exit(f"{failed} of {len(cases)} schedules differ from torch's")


if __name__ == "__main__":
    main()
