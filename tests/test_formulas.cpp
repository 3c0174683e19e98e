#include <gtest/gtest.h>

#include <cmath>

#include "core/config.h"
#include "core/plan/flops.h"
#include "optim/lr_schedule.h"
#include "tests/build_paths.h"
#include "train/data/indexed_dataset.h"

using namespace trident;

namespace {

ModelConfig small_model() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 8;
  m.num_attention_heads = 2;
  m.seq_length = 4;
  m.vocab_size = 16;
  return m;
}

ModelConfig row_1_7b() {
  ModelConfig m;
  m.num_layers = 24;
  m.hidden_size = 2304;
  m.num_attention_heads = 24;
  m.seq_length = 2048;
  m.vocab_size = 51200;
  return m;
}

}  // namespace

TEST(Formulas, ParameterCountByHand) {
  // Per layer: QKV 8*24+24, out 8*8+8, up 8*32+32, down 32*8+8, two LayerNorms 4*8 -> 872.
  // Two layers 1744, token and position embeddings (16+4)*8 = 160, final LayerNorm 16: 1920.
  EXPECT_EQ(gpt_parameter_count(small_model(), 16), 1920);
}

TEST(Formulas, NarayananCountLacksOnlyTheFinalLayerNorm) {
  for (const ModelConfig& m : {small_model(), row_1_7b()}) {
    const double paper = narayanan_parameter_count(m.num_layers, m.hidden_size, m.vocab_size,
                                                   m.seq_length);
    EXPECT_NEAR(double(gpt_parameter_count(m, m.vocab_size)), paper + 2.0 * double(m.hidden_size),
                1e-6 * paper);
  }
  // The table's "1.7B" row is 1.65e9 by the formula (the paper rounds up).
  EXPECT_NEAR(double(gpt_parameter_count(row_1_7b(), 51200)), 1.7e9, 0.03 * 1.7e9);
}

TEST(Formulas, MegatronFlopsByHand) {
  // 72 * B s l h^2 (1 + s/(6h) + V/(12 l h)) with B=1, s=2, l=1, h=4, V=8:
  // 72 * 32 * (1 + 1/12 + 1/6) = 2304 * 1.25 = 2880.
  EXPECT_DOUBLE_EQ(megatron_flops(1, 2, 1, 4, 8, false), 2880.0);
  // 96 * 32 * (1 + 1/12 + 1/8) = 3072 * 29/24 = 3712.
  EXPECT_DOUBLE_EQ(megatron_flops(1, 2, 1, 4, 8, true), 3712.0);
}

TEST(Formulas, IterationFlopsMatchMegatronClosedForms) {
  const ModelConfig m = row_1_7b();
  const IterationFlops none = iteration_flops(m, 51200, 512, Recompute::none);
  const IterationFlops full = iteration_flops(m, 51200, 512, Recompute::full);
  const IterationFlops selective = iteration_flops(m, 51200, 512, Recompute::selective);
  EXPECT_NEAR(none.model, megatron_flops(512, 2048, 24, 2304, 51200, false), 1e-9 * none.model);
  EXPECT_DOUBLE_EQ(none.hardware, none.model);
  EXPECT_DOUBLE_EQ(full.model, none.model);
  EXPECT_NEAR(full.hardware, megatron_flops(512, 2048, 24, 2304, 51200, true), 1e-9 * full.hardware);
  // Selective recompute repeats only QK^T and attention x V: 4 B s^2 h per layer.
  EXPECT_NEAR(selective.hardware - none.model, 4.0 * 512 * 2048.0 * 2048 * 2304 * 24, 1e3);
  EXPECT_DOUBLE_EQ(none.six_pd, 6.0 * double(gpt_parameter_count(m, 51200)) * 512 * 2048);
}

namespace {

// A Llama 3 shape (Dubey et al. 2024, Table 3): 8 key/value groups of head size 128, vocabulary
// 128256, RoPE, RMSNorm, SwiGLU, no biases, untied.
ModelConfig llama3(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn) {
  ModelConfig m;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.num_query_groups = 8;
  m.ffn_hidden_size = ffn;
  m.seq_length = 8192;
  m.vocab_size = 128256;
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbeddingType::rope;
  m.activation = Activation::swiglu;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = true;
  return m;
}

}  // namespace

// The parameter counts of Meta's released checkpoints (the sums of their tensors' sizes).
TEST(Formulas, LlamaThreeParameterCountsAreTheReleasedOnes) {
  // 8B by hand: per layer q and o 2 x 4096^2, k and v 2 x 4096 x 1024, SwiGLU 3 x 4096 x 14336,
  // two RMSNorms 2 x 4096: 218112000; x 32, plus embedding and head 2 x 128256 x 4096 and the
  // final norm 4096.
  EXPECT_EQ(gpt_parameter_count(llama3(32, 4096, 32, 14336), 128256), 218112000LL * 32 + 2LL * 128256 * 4096 + 4096);
  EXPECT_EQ(gpt_parameter_count(llama3(32, 4096, 32, 14336), 128256), 8030261248LL);
  EXPECT_EQ(gpt_parameter_count(llama3(80, 8192, 64, 28672), 128256), 70553706496LL);
  EXPECT_EQ(gpt_parameter_count(llama3(126, 16384, 128, 53248), 128256), 405853388800LL);
}

TEST(Formulas, GroupedQueryAttentionAndSwigluFlopsByHand) {
  // h 16, 4 heads in 2 groups (d 4), SwiGLU of 40, s 8, V 64, 2 layers, one sequence. Per layer
  // forward: QKV and out 2 s h ((4 + 2 x 2) 4 + 16) = 12288, SwiGLU 3 x 2 s h f = 30720,
  // attention 4 s^2 h = 4096: 47104; logits 2 s h V = 16384; x 3 for backward.
  ModelConfig m = llama3(2, 16, 4, 40);
  m.num_query_groups = 2;
  m.seq_length = 8;
  const IterationFlops flops = iteration_flops(m, 64, 1, Recompute::none);
  EXPECT_DOUBLE_EQ(flops.model, 3.0 * (2 * 47104 + 16384));
  EXPECT_DOUBLE_EQ(iteration_flops(m, 64, 1, Recompute::full).hardware, flops.model + 2 * 47104);
  // 6PD: per layer 16 x 32 + 16 x 16 + 3 x 16 x 40 + 2 x 16 = 2720; 2 layers, embedding and
  // head 2 x 64 x 16, final norm 16: 7504 parameters, 8 tokens.
  EXPECT_EQ(gpt_parameter_count(m, 64), 7504);
  EXPECT_DOUBLE_EQ(flops.six_pd, 6.0 * 7504 * 8);
}

// Mixtral 8x7B (Mistral AI's release: 46.7 B parameters, 12.9 B active per token): Llama's
// layer with 8 SwiGLU experts of 14336 and a router of 8 x 4096 instead of its MLP, the top 2
// active; a 32000-token vocabulary. configs/mixtral-8x7b.yaml is that model.
TEST(Formulas, MixtralConfigHasTheReleasedCounts) {
  const ModelConfig m = Config::load(std::string(TRIDENT_SOURCE_DIR) + "/configs/mixtral-8x7b.yaml").model;
  EXPECT_EQ(m.padded_vocab(2), 32000);
  EXPECT_EQ(gpt_parameter_count(m, 32000), 46702792704LL);
  EXPECT_EQ(gpt_active_parameter_count(m, 32000), 12879925248LL);
  // A dense model's active parameters are all of them.
  EXPECT_EQ(gpt_active_parameter_count(llama3(32, 4096, 32, 14336), 128256), 8030261248LL);
}

// Qwen3-30B-A3B (the Qwen team's release: 30.5 B parameters, 3.3 B active; transformers'
// Qwen3MoeForCausalLM built from its config.json counts 30,532,122,624 and, with 8 of the 128
// experts, 3,353,032,704): heads of 128 channels where hidden / heads is 64, per-head q/k norms,
// 128 experts of 768. configs/qwen3-30b-a3b.yaml is that model.
TEST(Formulas, Qwen3MoeConfigHasTheReleasedCounts) {
  const ModelConfig m = Config::load(std::string(TRIDENT_SOURCE_DIR) + "/configs/qwen3-30b-a3b.yaml").model;
  EXPECT_EQ(m.padded_vocab(1), 151936);
  EXPECT_EQ(m.attention_width(), 4096);
  EXPECT_EQ(gpt_parameter_count(m, 151936), 30532122624LL);
  EXPECT_EQ(gpt_active_parameter_count(m, 151936), 3353032704LL);
}

// configs/deepseek-v3-shape.yaml: 58 layers of 256 routed experts of 3 x 7168 x 2048 after 3
// dense ones, as DeepSeek-V3 holds them (its attention is not V3's, so only this part is compared).
TEST(Formulas, DeepSeekV3ShapeHasTheReleasedRoutedExperts) {
  const ModelConfig m = Config::load(std::string(TRIDENT_SOURCE_DIR) + "/configs/deepseek-v3-shape.yaml").model;
  EXPECT_EQ(m.moe_layers(), 58);
  EXPECT_FALSE(m.moe_layer(2));
  EXPECT_TRUE(m.moe_layer(3));
  int64_t routed = 0;
  for (int64_t layer = 0; layer < m.num_layers; ++layer) routed += gpt_layer_expert_parameter_count(m, layer);
  EXPECT_EQ(routed, 653908770816LL);
}

TEST(Formulas, MixtureOfExpertsFlopsByHand) {
  // The GQA example above with 4 experts of 10 in every other layer, top 2: layer 0's MLP is
  // 2 experts' 3 x 2 s h 10 = 15360 and the router's 2 s h 4 = 1024 instead of 30720; layer 1
  // is dense. 6PD counts the active parameters: layer 0 has 2 x 3 x 16 x 10 + 4 x 16 = 1024
  // of the MLP's 1920 (7504 - 1920 + 1024 = 6608).
  ModelConfig m = llama3(2, 16, 4, 40);
  m.num_query_groups = 2;
  m.seq_length = 8;
  m.num_moe_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 10;
  m.moe_layer_freq = 2;
  EXPECT_EQ(m.moe_layers(), 1);
  const IterationFlops flops = iteration_flops(m, 64, 1, Recompute::none);
  EXPECT_DOUBLE_EQ(flops.model, 3.0 * (47104 + (47104 - 30720 + 15360 + 1024) + 16384));
  EXPECT_EQ(gpt_parameter_count(m, 64), 7504 - 1920 + 4 * 3 * 16 * 10 + 4 * 16);
  EXPECT_EQ(gpt_active_parameter_count(m, 64), 6608);
  EXPECT_DOUBLE_EQ(flops.six_pd, 6.0 * 6608 * 8);
}

TEST(Formulas, KnownPeaks) {
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 80GB HBM3", Precision::bf16), 989.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 PCIe", Precision::bf16), 756.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA H200", Precision::fp16), 989.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 NVL", Precision::bf16), 835.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA H200 NVL", Precision::bf16), 835.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", Precision::bf16), 312.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", Precision::fp32), 0.0);  // not a 16-bit peak
  EXPECT_EQ(known_peak_tflops("cpu", Precision::bf16), 0.0);
}

TEST(Formulas, LearningRateSchedule) {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_iters = 10;
  o.decay_style = DecayStyle::cosine;
  EXPECT_DOUBLE_EQ(learning_rate(o, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 110), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 60, 110), 0.55);  // half-way: (max + min) / 2
  EXPECT_DOUBLE_EQ(learning_rate(o, 110, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 500, 110), 0.1);
  o.decay_style = DecayStyle::linear;
  EXPECT_DOUBLE_EQ(learning_rate(o, 35, 110), 1.0 - 0.9 * 0.25);
  o.decay_iters = 60;
  EXPECT_DOUBLE_EQ(learning_rate(o, 35, 110), 0.55);
  o.decay_style = DecayStyle::constant;
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 110), 1.0);
}

TEST(Formulas, UnigramEntropy) {
  EXPECT_NEAR(unigram_entropy_nats({5, 5}), std::log(2.0), 1e-12);
  EXPECT_NEAR(unigram_entropy_nats({1, 1, 1, 1, 0}), std::log(4.0), 1e-12);
  EXPECT_EQ(unigram_entropy_nats({7}), 0.0);
}
