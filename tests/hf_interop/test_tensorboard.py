"""TensorBoard's own event reader on what train.tensorboard_dir holds.

A run of configs/gpt-tiny.yaml writes its metrics file and a TensorBoard folder; TensorBoard's
EventAccumulator must give back every scalar of every metrics line at its iteration (to the
32-bit float an event holds). A resumed run writes a second file into the same folder: read
together they are one run, in which the steps a run wrote past the checkpoint it resumed from
(a run that ended after iteration 5 with its last checkpoint at 3) are replaced by the resumed
run's.

Exits 77 (skipped) when this Python lacks tensorboard or numpy.
"""

import importlib.util
import json
import sys
import unittest

import common

if importlib.util.find_spec("tensorboard") is None or importlib.util.find_spec("numpy") is None:
    print(f"skipped: {sys.executable} lacks tensorboard or numpy")
    sys.exit(common.SKIP)

import numpy as np  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402


def read_scalars(folder):
    """{tag: {step: value}} of every scalar TensorBoard reads in `folder`."""
    reader = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    reader.Reload()
    out = {}
    for tag in reader.Tags()["scalars"]:
        steps = [e.step for e in reader.Scalars(tag)]
        assert len(steps) == len(set(steps)), f"{tag}: steps {steps} repeat"
        out[tag] = {e.step: e.value for e in reader.Scalars(tag)}
    return out


def latest_lines(metrics_file):
    """{iteration: the metrics file's last line for it}: a resumed run appends its own."""
    lines = {}
    for line in metrics_file.read_text().splitlines():
        record = json.loads(line)
        lines[record["iteration"]] = record
    return lines


class TensorBoardEvents(common.ScratchFolderTest):
    def run_training(self, iters, *overrides):
        return common.run("train", "--config", common.SOURCE / "configs" / "gpt-tiny.yaml", "data.type=synthetic",
                          f"train.iters={iters}", "train.log_interval=2", "train.eval_interval=3",
                          "train.save_interval=3", f"train.checkpoint_dir={self.dir / 'checkpoints'}",
                          f"train.metrics_file={self.dir / 'metrics.jsonl'}",
                          f"train.tensorboard_dir={self.dir / 'tensorboard'}", *overrides)

    def assert_every_scalar(self, iterations):
        scalars = read_scalars(self.dir / "tensorboard")
        lines = latest_lines(self.dir / "metrics.jsonl")
        self.assertEqual(sorted(lines), iterations)
        for iteration, record in lines.items():
            for key, value in record.items():
                if key == "iteration":
                    continue
                self.assertIn(key, scalars)
                self.assertIn(iteration, scalars[key], f"{key} at iteration {iteration}")
                # The file's 9 digits and the event's float32 of the full value: one float32 step apart at most.
                self.assertLessEqual(abs(scalars[key][iteration] - value), float(np.spacing(np.float32(value))),
                                     f"{key} at iteration {iteration}")
        # Nothing beyond the metrics file: every step TensorBoard holds is one of its lines.
        for tag, by_step in scalars.items():
            self.assertEqual(set(by_step) - set(lines), set(), tag)
        return scalars

    def test_every_scalar_at_every_step_and_a_resumed_run_replaces_the_steps_it_redoes(self):
        self.run_training(5)
        scalars = self.assert_every_scalar([1, 2, 3, 4, 5])
        self.assertEqual(sorted(scalars["valid_loss"]), [3, 5])
        self.assertEqual(sorted(scalars["loss"]), [1, 2, 3, 4, 5])
        # As a run that ended after iteration 5 with its last checkpoint at 3 leaves its folder.
        checkpoints = self.dir / "checkpoints"
        for folder in checkpoints.glob("iter_*"):
            if folder.name != "iter_0000003":
                common.shutil.rmtree(folder)
        (checkpoints / "latest").write_text("iter_0000003")
        output = self.run_training(7, "optimizer.lr=0.002")  # steps 4 and 5 come out otherwise
        self.assertIn("resumed from", output)
        self.assertEqual(len(list((self.dir / "tensorboard").glob("events.out.tfevents.*"))), 2)
        before = scalars
        scalars = self.assert_every_scalar([1, 2, 3, 4, 5, 6, 7])
        for step in (1, 2, 3):
            self.assertEqual(scalars["loss"][step], before["loss"][step])
        self.assertNotEqual(scalars["loss"][5], before["loss"][5])


if __name__ == "__main__":
    unittest.main()
