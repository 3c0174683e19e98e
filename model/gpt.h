// GPT-2 / Megatron-style decoder: learned positions, pre-LayerNorm blocks, causal attention,
// GELU MLP, final LayerNorm, output head tied to the token embedding.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <vector>

#include "core/config.h"

namespace trident {

class SelfAttentionImpl : public torch::nn::Module {
 public:
  explicit SelfAttentionImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [b, s, h] -> [b, s, h]

  // QKV output rows are laid out [head][q|k|v][head_dim], so a contiguous slice of rows is a
  // contiguous group of whole heads (what tensor parallelism splits).
  torch::nn::Linear qkv{nullptr};
  torch::nn::Linear out{nullptr};

 private:
  int64_t heads_, head_dim_;
  double dropout_;
};
TORCH_MODULE(SelfAttention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear up{nullptr};
  torch::nn::Linear down{nullptr};
};
TORCH_MODULE(MLP);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const ModelConfig& config);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention attn{nullptr};
  MLP mlp{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Block);

class GPTImpl : public torch::nn::Module {
 public:
  // `vocab` is the padded vocabulary (rows of the embedding and the head).
  GPTImpl(const ModelConfig& config, int64_t vocab);

  // tokens [b, s] int64 -> logits [b, s, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);
  // Mean next-token cross-entropy, computed in at least fp32.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets);

  // Draws every parameter from the seed: normal(0, std) for matrices and embeddings, std /
  // sqrt(2 * layers) for the projections that add into the residual stream (GPT-2, Megatron),
  // ones and zeros for LayerNorms and biases.
  void initialize(uint64_t seed);

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> blocks;  // registered as "h<global layer index>"
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  ModelConfig config_;
};
TORCH_MODULE(GPT);

}  // namespace trident
