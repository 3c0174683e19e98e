"""(b) A GPT-2 made by transformers starts a trident run (train.init_from) at TP 1 and TP 2.

transformers makes a GPT2LMHeadModel with random weights (every tensor, the biases and
LayerNorms too, which HF starts at 0 and 1, so that no part of the mapping goes unchecked;
n_positions 128, of which trident takes model.seq_length = 64) and saves it with
save_pretrained (model.safetensors). trident trains one iteration from it, with a learning rate
of 0: optimizer.lr must be > 0, but with optimizer.warmup_iters=0, optimizer.min_lr=0 and
train.iters=1 the only iteration is at the schedule's end, min_lr (the metrics say lr 0), so
neither AdamW's step nor its decoupled weight decay (p *= 1 - lr * wd, wd 0.1 here) can move a
weight. At each layout:
 - the checkpoint, exported, is HF's model.safetensors bit for bit (wpe: its first 64 rows),
   which shows both that the import is exact and that the iteration changed nothing;
 - `generate --logits` from the checkpoint gives HF's logits on the same ids (1e-5 of the
   largest logit);
 - the iteration's loss is HF's cross-entropy on the iteration's batch (relative 1e-5), and
   the TP 1 and TP 2 losses agree to 1e-5.
The batch is known without reproducing trident's shuffled order: every document of the dataset
is the same 63 tokens and the end-of-document id, so the token stream repeats every 64 =
model.seq_length tokens, and every sample (seq_length + 1 tokens from a multiple of seq_length)
is the same.

model.make_vocab_size_divisible_by=2: the vocabulary (300 ids, more than the tokenizer's 268) is
then not padded, at TP 1 (a multiple of 2) or TP 2 (of 4). With the default, 128 x TP, it is
padded to 384 at TP 1 and 512 at TP 2; train.init_from leaves the padding rows at their fresh
values, and their logits, never a target, still enter the softmax: the first loss then depends
on the layout and is not HF's (6.160 at TP 1, 6.389 at TP 2, HF's 5.972 when this was written).
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.require_packages()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

VOCAB, SEQ, POSITIONS = 300, common.SEQ, 128
TRAIN = (f"model.vocab_size={VOCAB}", "model.make_vocab_size_divisible_by=2", *common.TINY_MODEL,
         "train.iters=1", "optimizer.warmup_iters=0", "optimizer.min_lr=0", "optimizer.weight_decay=0.1")


def random_gpt2(folder):
    """A GPT2LMHeadModel of TINY_MODEL's shape with every parameter random, saved to `folder`."""
    config = GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=64, n_layer=2, n_head=4, n_inner=256,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        layer_norm_epsilon=1e-5, bos_token_id=common.GPT2_TINY_EOD,
                        eos_token_id=common.GPT2_TINY_EOD)
    torch.manual_seed(20240607)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            layer_norm_weight = ".ln_" in name and name.endswith(".weight")
            parameter.normal_(1.0 if layer_norm_weight else 0.0, 0.1)
    model.save_pretrained(folder)
    return model


class InitFromTransformers(common.ScratchFolderTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.hf_dir = cls.dir / "hf"
        cls.model = random_gpt2(cls.hf_dir)
        cls.dataset = common.repeated_dataset(cls.dir)
        cls.runs = {}  # TP -> (checkpoint, train's output, metrics)

    def run_at(self, tensor):
        """The one-iteration run from HF's model at TP `tensor`, trained once for all the tests."""
        if tensor > 1:
            common.skip_without_mpi(self)
        if tensor not in self.runs:
            checkpoint = self.dir / f"ckpt_tp{tensor}"
            output, metrics = common.train(checkpoint, f"data.path={self.dataset}", f"train.init_from={self.hf_dir}",
                                           *TRAIN, tensor=tensor)
            self.runs[tensor] = (checkpoint, output, metrics)
        return self.runs[tensor]

    def hf_logits(self, ids):
        with torch.no_grad():
            return self.model(ids[None]).logits[0]

    def check_weights(self, tensor):
        checkpoint, output, metrics = self.run_at(tensor)
        self.assertIn(f"initialized the weights from train.init_from '{self.hf_dir}'", output)
        self.assertEqual(len(metrics), 1)
        self.assertEqual(metrics[0]["lr"], 0, "the only iteration should run at min_lr = 0")
        hf = load_file(str(self.hf_dir / "model.safetensors"))
        # trident keeps model.seq_length positions of wpe.
        expected = {name: value[:SEQ] if name.endswith("wpe.weight") else value for name, value in hf.items()}
        common.assert_export_is(self, checkpoint, self.dir / f"export_tp{tensor}", expected, f"TP {tensor}")

    def check_logits(self, tensor):
        checkpoint, _, _ = self.run_at(tensor)
        ids, logits = common.trident_logits(checkpoint, common.PROMPT, self.dir / f"logits_tp{tensor}.safetensors")
        self.assertGreaterEqual(len(ids), 48, "the prompt should fill most of the 64 positions")
        common.assert_logits_match(self, self.hf_logits(ids), logits, f"train.init_from at TP {tensor}")

    def hf_loss(self):
        """HF's cross-entropy on the one sample every batch is made of (see the module's comment)."""
        sample = common.repeated_sample(self, self.dataset)
        return F.cross_entropy(self.hf_logits(sample[:-1]), sample[1:]).item()

    def test_import_is_exact_and_a_zero_learning_rate_moves_nothing(self):
        for tensor in (1, 2):
            with self.subTest(tp=tensor):
                self.check_weights(tensor)

    def test_trident_gives_hfs_logits(self):
        for tensor in (1, 2):
            with self.subTest(tp=tensor):
                self.check_logits(tensor)

    def test_first_loss_is_hfs_at_both_layouts(self):
        expected = self.hf_loss()
        losses = {}
        for tensor in (1, 2):
            with self.subTest(tp=tensor):
                losses[tensor] = self.run_at(tensor)[2][0]["loss"]
                print(f"iteration 1 loss at TP {tensor}: {losses[tensor]!r}, HF's: {expected!r}, "
                      f"relative difference {abs(losses[tensor] - expected) / expected:.3g}", file=sys.stderr)
                self.assertLessEqual(abs(losses[tensor] - expected), common.RTOL * expected)
        if len(losses) == 2:
            self.assertLessEqual(abs(losses[1] - losses[2]), 1e-5, f"TP 1 and TP 2 losses differ: {losses}")


if __name__ == "__main__":
    common.main()
