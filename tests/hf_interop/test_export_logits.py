"""(a) transformers' GPT2LMHeadModel loads what `export` writes and computes trident's logits.

A tiny GPT trained for 3 iterations (so that its weights are not the initialisation) on a
dataset of the tests' GPT-2 BPE, at TP 1 and at TP 2 (whose checkpoint splits the matrices
between two ranks, c_attn by heads), is exported; GPT2LMHeadModel.from_pretrained loads the
folder with no missing, unexpected or mismatched tensor, and its fp32 logits on the prompt's ids
(as `generate --logits` encodes it) equal trident's to 1e-5 of the largest logit.
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.require_packages()

import torch  # noqa: E402
from transformers import GPT2LMHeadModel  # noqa: E402


class ExportedModelInTransformers(common.ScratchFolderTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dataset = common.preprocess(cls.dir / "corpus", list(common.corpus(cls.dir / "text")),
                                        common.gpt2_tiny_tokenizer())

    def check_layout(self, tensor):
        name = f"tp{tensor}"
        checkpoint, exported = self.dir / f"ckpt_{name}", self.dir / f"hf_{name}"
        _, metrics = common.train(checkpoint, f"data.path={self.dataset}",
                                  f"model.vocab_size={common.GPT2_TINY_VOCAB}", *common.TINY_MODEL,
                                  "train.iters=3", "optimizer.warmup_iters=1", tensor=tensor)
        self.assertEqual([m["iteration"] for m in metrics], [1, 2, 3])
        self.assertTrue(all(m["lr"] > 0 for m in metrics), metrics)  # the weights moved
        common.export(checkpoint, exported)

        model = common.from_pretrained_exactly(self, GPT2LMHeadModel, exported)
        self.assertEqual(model.dtype, torch.float32)
        self.assertEqual(model.config.eos_token_id, common.GPT2_TINY_EOD)
        self.assertIs(model.lm_head.weight, model.transformer.wte.weight)  # tied, as in trident

        ids, logits = common.trident_logits(checkpoint, common.PROMPT, self.dir / f"logits_{name}.safetensors")
        self.assertEqual(ids.dtype, torch.int64)
        self.assertEqual(logits.dtype, torch.float32)
        self.assertGreaterEqual(len(ids), 48, "the prompt should fill most of the 64 positions")
        with torch.no_grad():
            hf = model(ids[None]).logits[0]
        common.assert_logits_match(self, hf, logits, f"export of a TP {tensor} checkpoint")

    def test_tp1_export_gives_tridents_logits(self):
        self.check_layout(1)

    def test_tp2_export_gives_tridents_logits(self):
        common.skip_without_mpi(self)
        self.check_layout(2)


if __name__ == "__main__":
    common.main()
