"""(g) Mixtral, Qwen3-MoE and Qwen3 both ways: models made by transformers start trident runs, and
trident's exports load in transformers with nothing missing or unexpected.

Each family as a tiny random model (every parameter random, the RMSNorm weights around 1), saved
by transformers' own save_pretrained (one file per expert projection, as the Hub's checkpoints):
 - MixtralForCausalLM: 4 experts of width 32 in both layers, each token through 2, weighted by
   the softmax over the chosen two (trident's softmax router);
 - Qwen3MoeForCausalLM: per-head q/k RMSNorm, a head size of 32 where hidden / heads is 16
   (model.kv_channels), a dense first layer (mlp_only_layers=[0], model.moe_first_dense_layers=1)
   and norm_topk_prob=false (model.moe_router_pre_softmax=true: the chosen experts' probabilities
   of the softmax over all four, not renormalised);
 - Qwen3ForCausalLM: the same attention, a dense MLP.
From transformers: trident trains one iteration from the folder at a learning rate of 0 (see
test_init_from.py for why that moves nothing) at EP 1 and EP 2 (TP 1 and TP 2 for the dense
Qwen3); the checkpoint, exported, is HF's model.safetensors bit for bit, `generate --logits`
gives HF's logits (1e-5 of the largest) and the iteration's loss is HF's cross-entropy on the
iteration's batch (common.repeated_dataset).
To transformers: trident trains 3 iterations (the weights move) at EP 2 (TP 2), exports, and the
family's class loads the folder with nothing missing, unexpected or mismatched and gives
trident's logits (1e-5 of the largest).
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.require_packages()

import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
import transformers  # noqa: E402

VOCAB = 300
ZERO_LR = ("train.iters=1", "optimizer.warmup_iters=0", "optimizer.min_lr=0", "optimizer.weight_decay=0.1")
# What every family here shares with trident's Llama architecture (common.LLAMA without Llama 3.1's
# RoPE scaling and ffn).
DECODER = (f"model.vocab_size={VOCAB}", "model.make_vocab_size_divisible_by=2", *common.TINY_MODEL,
           "model.normalization=rmsnorm", "model.position_embedding_type=rope", "model.activation=swiglu",
           "model.num_query_groups=2", "model.add_bias_linear=false",
           "model.untie_embeddings_and_output_weights=true", "model.rope_theta=1000000")
HF_SHAPE = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=64, rope_theta=1000000.0, tie_word_embeddings=False,
                bos_token_id=common.GPT2_TINY_EOD, eos_token_id=common.GPT2_TINY_EOD)
QWEN3_ATTENTION = ("model.kv_channels=32", "model.qk_layernorm=true", "model.layernorm_epsilon=1e-6")

FAMILIES = {
    "mixtral": dict(
        model_class=transformers.MixtralForCausalLM,
        config=lambda: transformers.MixtralConfig(**HF_SHAPE, intermediate_size=32, num_local_experts=4,
                                                  num_experts_per_tok=2, rms_norm_eps=1e-5),
        trident=(*DECODER, "model.num_moe_experts=4", "model.moe_router_topk=2", "model.moe_ffn_hidden_size=32"),
        layout="expert"),
    "qwen3_moe": dict(
        model_class=transformers.Qwen3MoeForCausalLM,
        config=lambda: transformers.Qwen3MoeConfig(**HF_SHAPE, head_dim=32, intermediate_size=96,
                                                   moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                                   norm_topk_prob=False, mlp_only_layers=[0], rms_norm_eps=1e-6),
        trident=(*DECODER, *QWEN3_ATTENTION, "model.ffn_hidden_size=96", "model.num_moe_experts=4",
                 "model.moe_router_topk=2", "model.moe_ffn_hidden_size=32", "model.moe_first_dense_layers=1",
                 "model.moe_router_pre_softmax=true"),
        layout="expert"),
    "qwen3": dict(
        model_class=transformers.Qwen3ForCausalLM,
        config=lambda: transformers.Qwen3Config(**HF_SHAPE, head_dim=32, intermediate_size=96, rms_norm_eps=1e-6),
        trident=(*DECODER, *QWEN3_ATTENTION, "model.ffn_hidden_size=96"),
        layout="tensor"),
}


def random_model(family, folder):
    """The family's model with every parameter random, saved to `folder` by save_pretrained."""
    return common.save_random(family["model_class"](family["config"]()), folder, seed=20261127)


class FamiliesBothWays(common.ScratchFolderTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.repeated = common.repeated_dataset(cls.dir)
        cls.corpus = common.preprocess(cls.dir / "corpus", list(common.corpus(cls.dir / "corpus_text")),
                                       common.gpt2_tiny_tokenizer())

    def layouts(self, family):
        yield 1
        if common.MPIEXEC:
            yield 2
        else:
            print("no 2-process run: trident has no MPI (TRIDENT_MPIEXEC is empty)", file=sys.stderr)

    def train(self, family, checkpoint, *overrides, ranks):
        return common.train(checkpoint, *family["trident"], *overrides, **{family["layout"]: ranks})

    def test_from_transformers(self):
        for name, family in FAMILIES.items():
            hf_dir = self.dir / f"{name}_hf"
            model = random_model(family, hf_dir)
            hf = load_file(str(hf_dir / "model.safetensors"))
            sample = common.repeated_sample(self, self.repeated)
            expected_loss = F.cross_entropy(common.logits_of(model, sample[:-1]), sample[1:]).item()
            for ranks in self.layouts(family):
                with self.subTest(family=name, **{family["layout"]: ranks}):
                    what = f"{name} from transformers at {family['layout']} {ranks}"
                    checkpoint = self.dir / f"{name}_from_hf_{ranks}"
                    output, metrics = self.train(family, checkpoint, f"data.path={self.repeated}",
                                                 f"train.init_from={hf_dir}", *ZERO_LR, ranks=ranks)
                    self.assertIn(f"initialized the weights from train.init_from '{hf_dir}'", output)
                    self.assertEqual(metrics[0]["lr"], 0, "the only iteration should run at min_lr = 0")
                    common.assert_export_is(self, checkpoint, self.dir / f"{name}_back_{ranks}", hf, what)
                    ids, logits = common.trident_logits(checkpoint, common.PROMPT, self.dir / f"{name}_logits_{ranks}.st")
                    common.assert_logits_match(self, common.logits_of(model, ids), logits, what)
                    loss = metrics[0]["loss"]
                    print(f"{what}: iteration 1 loss {loss!r}, HF's {expected_loss!r}", file=sys.stderr)
                    self.assertLessEqual(abs(loss - expected_loss), common.RTOL * expected_loss)

    def test_to_transformers(self):
        for name, family in FAMILIES.items():
            ranks = 2 if common.MPIEXEC else 1
            with self.subTest(family=name, **{family["layout"]: ranks}):
                checkpoint, exported = self.dir / f"{name}_trained", self.dir / f"{name}_export"
                _, metrics = self.train(family, checkpoint, f"data.path={self.corpus}", "train.iters=3",
                                        "optimizer.warmup_iters=1", ranks=ranks)
                self.assertTrue(all(m["lr"] > 0 for m in metrics), metrics)  # the weights moved
                common.export(checkpoint, exported)
                model = common.from_pretrained_exactly(self, family["model_class"], exported)
                self.assertEqual(type(model.config), type(family["config"]()))
                ids, logits = common.trident_logits(checkpoint, common.PROMPT, self.dir / f"{name}_export.st")
                common.assert_logits_match(self, common.logits_of(model, ids), logits,
                                           f"{name}: export of a {family['layout']} {ranks} checkpoint")


if __name__ == "__main__":
    common.main()
