"""(d) Llama both ways: a LlamaForCausalLM made by transformers starts a trident run, and
trident's export loads in transformers; at TP 1 and TP 2, with grouped-query attention.

The model: TINY_MODEL's shape as a Llama (common.LLAMA: 4 query heads sharing 2 key/value heads,
so that TP 2 gives each rank one group; RoPE with theta 500000 and Llama 3.1's scaling; SwiGLU;
no biases; an untied head), a vocabulary of 300 that neither layout pads
(model.make_vocab_size_divisible_by=2).

From transformers: a LlamaForCausalLM with every parameter random (the RMSNorm weights around
1) saved by save_pretrained; trident trains one iteration from it at a learning rate of 0 (see
test_init_from.py for why that moves nothing) at TP 1 and TP 2. The checkpoint, exported, is
HF's model.safetensors bit for bit; `generate --logits` gives HF's logits (1e-5 of the largest);
the iteration's loss is HF's cross-entropy on the iteration's batch (common.repeated_dataset).

To transformers: trident trains 3 iterations (the weights move) at TP 1 and TP 2, exports, and
LlamaForCausalLM.from_pretrained loads the folder with nothing missing, unexpected or
mismatched and gives trident's logits (1e-5 of the largest).
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.require_packages()

import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

VOCAB = 300
MODEL = (f"model.vocab_size={VOCAB}", "model.make_vocab_size_divisible_by=2", *common.TINY_MODEL, *common.LLAMA)
ZERO_LR = ("train.iters=1", "optimizer.warmup_iters=0", "optimizer.min_lr=0", "optimizer.weight_decay=0.1")


def random_llama(folder):
    """A LlamaForCausalLM of MODEL's shape with every parameter random, saved to `folder`."""
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
                         max_position_embeddings=65536, rms_norm_eps=1e-5, rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                         tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                         bos_token_id=common.GPT2_TINY_EOD, eos_token_id=common.GPT2_TINY_EOD)
    return common.save_random(LlamaForCausalLM(config), folder, seed=20241124)


class LlamaBothWays(common.ScratchFolderTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.hf_dir = cls.dir / "hf"
        cls.model = random_llama(cls.hf_dir)
        cls.repeated = common.repeated_dataset(cls.dir)
        cls.corpus = common.preprocess(cls.dir / "corpus", list(common.corpus(cls.dir / "corpus_text")),
                                       common.gpt2_tiny_tokenizer())
        cls.runs = {}  # TP -> (checkpoint, train's output, metrics) of the run from HF's model

    def layouts(self):
        yield 1
        if common.MPIEXEC:
            yield 2
        else:
            print("no TP 2 run: trident has no MPI (TRIDENT_MPIEXEC is empty)", file=sys.stderr)

    def run_from_hf(self, tensor):
        if tensor not in self.runs:
            checkpoint = self.dir / f"from_hf_tp{tensor}"
            output, metrics = common.train(checkpoint, f"data.path={self.repeated}", f"train.init_from={self.hf_dir}",
                                           *MODEL, *ZERO_LR, tensor=tensor)
            self.runs[tensor] = (checkpoint, output, metrics)
        return self.runs[tensor]

    def test_import_is_exact_and_a_zero_learning_rate_moves_nothing(self):
        hf = load_file(str(self.hf_dir / "model.safetensors"))
        self.assertIn("lm_head.weight", hf)  # untied
        for tensor in self.layouts():
            with self.subTest(tp=tensor):
                checkpoint, output, metrics = self.run_from_hf(tensor)
                self.assertIn(f"initialized the weights from train.init_from '{self.hf_dir}'", output)
                self.assertEqual(metrics[0]["lr"], 0, "the only iteration should run at min_lr = 0")
                common.assert_export_is(self, checkpoint, self.dir / f"back_tp{tensor}", hf, f"TP {tensor}")

    def test_trident_gives_hfs_logits_and_loss(self):
        sample = common.repeated_sample(self, self.repeated)
        expected_loss = F.cross_entropy(common.logits_of(self.model, sample[:-1]), sample[1:]).item()
        for tensor in self.layouts():
            with self.subTest(tp=tensor):
                checkpoint, _, metrics = self.run_from_hf(tensor)
                ids, logits = common.trident_logits(checkpoint, common.PROMPT, self.dir / f"logits_tp{tensor}.safetensors")
                self.assertGreaterEqual(len(ids), 48, "the prompt should fill most of the 64 positions")
                common.assert_logits_match(self, common.logits_of(self.model, ids), logits,
                                           f"train.init_from at TP {tensor}")
                loss = metrics[0]["loss"]
                print(f"iteration 1 loss at TP {tensor}: {loss!r}, HF's: {expected_loss!r}", file=sys.stderr)
                self.assertLessEqual(abs(loss - expected_loss), common.RTOL * expected_loss)

    def test_tridents_export_gives_tridents_logits_in_transformers(self):
        for tensor in self.layouts():
            with self.subTest(tp=tensor):
                checkpoint, exported = self.dir / f"trained_tp{tensor}", self.dir / f"export_tp{tensor}"
                _, metrics = common.train(checkpoint, f"data.path={self.corpus}", *MODEL, "train.iters=3",
                                          "optimizer.warmup_iters=1", tensor=tensor)
                self.assertTrue(all(m["lr"] > 0 for m in metrics), metrics)  # the weights moved
                common.export(checkpoint, exported)
                model = common.from_pretrained_exactly(self, LlamaForCausalLM, exported)
                self.assertEqual(model.config.num_key_value_heads, 2)
                self.assertEqual(model.config.rope_parameters["rope_type"], "llama3")
                self.assertIsNot(model.lm_head.weight, model.model.embed_tokens.weight)  # untied, as in trident
                ids, logits = common.trident_logits(checkpoint, common.PROMPT, self.dir / f"export_tp{tensor}.safetensors")
                common.assert_logits_match(self, common.logits_of(model, ids), logits,
                                           f"export of a TP {tensor} checkpoint")


if __name__ == "__main__":
    common.main()
