#include <gtest/gtest.h>

#include <cmath>

#include "core/plan/flops.h"
#include "optim/lr_schedule.h"
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

TEST(Formulas, KnownPeaks) {
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 80GB HBM3", Precision::bf16), 989.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 PCIe", Precision::bf16), 756.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA H200", Precision::fp16), 989.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", Precision::bf16), 312.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", Precision::fp32), 0.0);  // not a 16-bit peak
  EXPECT_EQ(known_peak_tflops("cpu", Precision::bf16), 0.0);
}

TEST(Formulas, LearningRateSchedule) {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_iters = 10;
  o.decay_style = "cosine";
  EXPECT_DOUBLE_EQ(learning_rate(o, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 110), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 60, 110), 0.55);  // half-way: (max + min) / 2
  EXPECT_DOUBLE_EQ(learning_rate(o, 110, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 500, 110), 0.1);
  o.decay_style = "linear";
  EXPECT_DOUBLE_EQ(learning_rate(o, 35, 110), 1.0 - 0.9 * 0.25);
  o.decay_iters = 60;
  EXPECT_DOUBLE_EQ(learning_rate(o, 35, 110), 0.55);
  o.decay_style = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 110), 1.0);
}

TEST(Formulas, UnigramEntropy) {
  EXPECT_NEAR(unigram_entropy_nats({5, 5}), std::log(2.0), 1e-12);
  EXPECT_NEAR(unigram_entropy_nats({1, 1, 1, 1, 0}), std::log(4.0), 1e-12);
  EXPECT_EQ(unigram_entropy_nats({7}), 0.0);
}
