// GPT-2 / Megatron-style decoder: learned positions, pre-LayerNorm blocks, causal attention,
// GELU MLP, final LayerNorm, output head tied to the token embedding; tensor- and
// sequence-parallel over a given group (a group of one is the plain model).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "core/config.h"
#include "model/dropout.h"
#include "model/layers.h"
#include "model/recompute.h"
#include "parallel/context_parallel.h"
#include "parallel/sharded_parameters.h"
#include "parallel/tensor_parallel.h"

namespace trident {

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(const ModelConfig& config, const TensorParallel& tp, Recompute recompute,
                    ContextParallel cp, std::shared_ptr<DropoutStreams> streams);
  // core_ holds `this` (for recomputation in backward).
  SelfAttentionImpl(const SelfAttentionImpl&) = delete;
  SelfAttentionImpl& operator=(const SelfAttentionImpl&) = delete;
  torch::Tensor forward(const torch::Tensor& x);  // [b, s/c(/t with SP), h] -> same

  // QKV output rows are laid out [head][q|k|v][head_dim], so a contiguous slice of rows is a
  // contiguous group of whole heads: column-parallel gives each rank heads / t heads.
  ColumnParallelLinear qkv{nullptr};
  RowParallelLinear out{nullptr};

 private:
  int64_t local_heads_, head_dim_;
  double dropout_;
  bool recompute_core_;
  ContextParallel cp_;
  std::shared_ptr<DropoutStreams> streams_;
  RecomputedFunction core_;  // the attention core, kept for recomputation in backward
};
TORCH_MODULE(SelfAttention);

class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const ModelConfig& config, const TensorParallel& tp);
  torch::Tensor forward(const torch::Tensor& x);
  ColumnParallelLinear up{nullptr};
  RowParallelLinear down{nullptr};
};
TORCH_MODULE(MLP);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& config, const TensorParallel& tp, Recompute recompute, const ContextParallel& cp,
            std::shared_ptr<DropoutStreams> streams);
  // compute_ holds `this` (for recomputation in backward).
  BlockImpl(const BlockImpl&) = delete;
  BlockImpl& operator=(const BlockImpl&) = delete;
  torch::Tensor forward(torch::Tensor x);
  LayerNorm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention attn{nullptr};
  MLP mlp{nullptr};

 private:
  torch::Tensor compute(const torch::Tensor& x);
  double hidden_dropout_;
  RandomStream* hidden_stream_;  // model-parallel with sequence parallelism, else replicated
  bool recompute_;
  std::shared_ptr<DropoutStreams> streams_;
  RecomputedFunction compute_;  // the whole block, kept for recomputation in backward
};
TORCH_MODULE(Block);

// The part of the model a pipeline stage (or one of its interleaved chunks) holds: contiguous
// layers; the embeddings on the first, final LayerNorm and head on the last. The last stage of
// a pipeline keeps its own copy of the tied embedding (same name, same initial values) whose
// gradient is summed with the first stage's.
struct Stage {
  int64_t first_layer = 0;
  int64_t num_layers = -1;  // -1: all layers
  bool embedding = true;
  bool head = true;

  // Virtual stage `index` of `count` (count = pp_size * virtual_stages), each holding
  // `layers` contiguous layers.
  static Stage of(int64_t index, int64_t count, int64_t layers) {
    return {index * layers, layers, index == 0, index == count - 1};
  }
  // The tied embedding this stage holds: none when it holds both ends of the model.
  Tied tied_embedding() const { return embedding && head ? Tied::no : embedding ? Tied::owner : Tied::copy; }
};

class GPTImpl : public torch::nn::Module {
 public:
  // `vocab` is the padded vocabulary (rows of the embedding and the head, over all TP ranks).
  // With context parallelism every sequence arrives as this rank's chunks of it
  // (parallel/context_parallel.h), the positions are theirs.
  GPTImpl(const ModelConfig& config, int64_t vocab, TensorParallel tp = {}, Stage stage = {},
          Recompute recompute = Recompute::none, ContextParallel cp = {});

  // Tokens [b, s/c] int64 on the first stage, else the previous stage's activations
  // [b, s/c(/t with SP), h] -> logits [b, s/c, vocab / t] on the last stage (this rank's
  // vocabulary slice), else activations for the next stage.
  torch::Tensor forward(const torch::Tensor& input);
  // Mean next-token cross-entropy, computed in at least fp32, over the whole vocabulary.
  torch::Tensor loss(const torch::Tensor& input, const torch::Tensor& targets);

  // Draws every parameter as its role says (model/init.h): normal(0, std) for matrices and
  // embeddings, std / sqrt(2 * layers) for the projections that add into the residual stream
  // (GPT-2, Megatron), ones and zeros for LayerNorms and biases; whole, then this rank's slice.
  // Seeds the dropout streams from `seed` too, as for iteration 0 (model/dropout.h).
  void initialize(uint64_t seed);
  // Starts the dropout streams of training iteration `iteration` (1, 2, ...).
  void begin_iteration(int64_t iteration);

  // ZeRO-3's units (parallel/sharded_parameters.h): each block's parameters are unit
  // first_layer + index (its global layer), the chunk's other parameters rest_unit(). Per
  // parameter, in named_parameters() order.
  std::vector<int64_t> parameter_units() const;
  int64_t rest_unit() const { return -1 - stage_.first_layer; }
  // From now on forward gathers the weights through `weights` unit by unit (ZeRO-3).
  void gather_weights_through(std::shared_ptr<ShardedParameters> weights) { gathered_ = std::move(weights); }

  const TensorParallel& tensor_parallel() const { return tp_; }
  const Stage& stage() const { return stage_; }

  VocabParallelEmbedding wte{nullptr};
  PositionEmbedding wpe{nullptr};
  std::vector<Block> blocks;  // registered as "h<global layer index>"
  LayerNorm ln_f{nullptr};

 private:
  ModelConfig config_;
  TensorParallel tp_;
  Stage stage_;
  ContextParallel cp_;
  uint64_t seed_ = 0;
  std::shared_ptr<DropoutStreams> streams_ = std::make_shared<DropoutStreams>();
  std::shared_ptr<ShardedParameters> gathered_;  // ZeRO-3
};
TORCH_MODULE(GPT);

}  // namespace trident
