"""Megatron's own blending code against the order trident blends datasets in.

tests/data/megatron_blend.json holds, for a few data.path blends, which dataset each of the
first 10000 samples comes from. This script computes the same with megatron-core's compiled
helpers (build_blending_indices, what BlendedDataset calls) and checks that the file holds
exactly that; the C++ test BlendedSamples.FollowsMegatronsBlendingIndices checks that trident
gives the file's order. `--write` writes the file from megatron-core.

Exits 77 (skipped) when this Python lacks megatron-core or numpy.
"""

import importlib.util
import json
import sys
import unittest
from pathlib import Path

import common

GOLDEN = common.SOURCE / "tests" / "data" / "megatron_blend.json"
SAMPLES = 10000
# data.path's weights, before normalisation (trident and Megatron both divide by their sum).
BLENDS = {"0.7 web 0.3 code": [0.7, 0.3], "5 a 3 b 2 c": [5, 3, 2], "1 a 1 b 1 c": [1, 1, 1],
          "0.6 a 0.25 b 0.1 c 0.05 d": [0.6, 0.25, 0.1, 0.05]}


def megatron_helpers():
    """megatron-core's compiled helpers, loaded without importing the megatron package."""
    spec = importlib.util.find_spec("megatron")
    if spec is None or importlib.util.find_spec("numpy") is None:
        print(f"skipped: {sys.executable} lacks megatron-core or numpy")
        sys.exit(common.SKIP)
    found = [p for folder in spec.submodule_search_locations
             for p in (Path(folder) / "core" / "datasets").glob("helpers_cpp*.so")]
    if not found:
        print("skipped: megatron-core has no compiled helpers_cpp")
        sys.exit(common.SKIP)
    module_spec = importlib.util.spec_from_file_location("helpers_cpp", found[0])
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def megatron_orders():
    import numpy  # megatron_helpers() checked for it
    helpers = megatron_helpers()
    orders = {}
    for path, weights in BLENDS.items():
        w = numpy.array(weights, dtype=numpy.float64)
        w = w / numpy.sum(w)  # as BlendedMegatronDatasetBuilder normalises them
        dataset_index = numpy.zeros(SAMPLES, dtype=numpy.int16)
        dataset_sample_index = numpy.zeros(SAMPLES, dtype=numpy.int64)
        helpers.build_blending_indices(dataset_index, dataset_sample_index, w, len(weights), SAMPLES, False)
        orders[path] = "".join(map(str, dataset_index.tolist()))
    return orders


class MegatronBlend(unittest.TestCase):
    def test_the_golden_file_holds_megatrons_order(self):
        golden = json.loads(GOLDEN.read_text())
        orders = megatron_orders()
        self.assertEqual(sorted(golden), sorted(orders))
        for path, order in orders.items():
            self.assertEqual(golden[path], order, path)


if __name__ == "__main__":
    megatron_helpers()  # exits 77 (skipped) here, outside unittest, when megatron-core is missing
    if sys.argv[1:] == ["--write"]:
        GOLDEN.write_text(json.dumps(megatron_orders(), indent=1) + "\n")
        print(f"wrote {GOLDEN}")
    else:
        unittest.main()
