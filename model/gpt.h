// A pre-norm decoder, GPT-2's or Llama's (model.* chooses, core/config.h): learned positions or
// RoPE, LayerNorm or RMSNorm, causal attention with one key/value head per query head or per
// group of them, a GELU or SwiGLU MLP, biases or none, an output head tied to the token
// embedding or its own; tensor- and sequence-parallel over a given group (a group of one is the
// plain model).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "model/block.h"
#include "model/dropout.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/recompute.h"
#include "model/rotary.h"
#include "parallel/context_parallel.h"
#include "parallel/sharded_parameters.h"
#include "parallel/tensor_parallel.h"

namespace trident {

// The keys and values of the tokens a model has seen, layer by layer, for generation one token
// at a time: each new token's forward attends to them instead of recomputing them.
struct KvCache {
  std::vector<torch::Tensor> keys, values;  // per block: [b, groups, tokens, head_dim]
  int64_t tokens = 0;                       // positions 0 .. tokens - 1 are held
};

// What a loss per token gets on the stage that holds the head.
struct TokenLossInput {
  torch::Tensor logits;     // [N, vocabulary / t]: this TP rank's slice (fp32, or fp64 for precision=fp64)
  torch::Tensor targets;    // [N]: the next tokens, over the whole vocabulary
  torch::Tensor loss_mask;  // [N]: 1 where a token counts, 0 where not; undefined: every token counts
  bool training;            // false in validation
  Communicator& tp;         // the group that holds the other slices
};
// Returns [N] losses, identical on every rank of `tp`; GPTImpl::loss masks and averages them as
// it does the built-in cross-entropy. Must be built only from vocabulary-parallel operations
// (vocab_parallel_cross_entropy, reduce_from_tensor_parallel: parallel/tensor_parallel.h).
using TokenLoss = std::function<torch::Tensor(const TokenLossInput& in)>;

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(const ModelConfig& config, const TensorParallel& tp, Recompute recompute,
                    ContextParallel cp, std::shared_ptr<DropoutStreams> streams);
  // core_ holds `this` (for recomputation in backward).
  SelfAttentionImpl(const SelfAttentionImpl&) = delete;
  SelfAttentionImpl& operator=(const SelfAttentionImpl&) = delete;
  torch::Tensor forward(const torch::Tensor& x, const Documents& documents = {});  // [b, s/c(/t with SP), h] -> same
  // New tokens [b, n, h] at `positions` [n], following the cached ones, whose keys and values
  // ([b, g, cached, d], undefined when none) gain theirs. One rank, no context parallelism.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& positions, torch::Tensor& keys,
                               torch::Tensor& values);

  // QKV output rows are laid out by key/value group, each group its query heads, then its key
  // head, then its value head (Megatron's layout):
  //
  //   [ group 0: q_0 .. q_{a/g-1} | k | v ][ group 1: ... ] ...   each slot head_dim rows
  //
  // so a contiguous slice of rows is whole groups: column-parallel gives each rank g / t groups
  // and their a / t query heads. With a group per head (g = a) this is [head][q|k|v].
  ColumnParallelLinear qkv{nullptr};
  RowParallelLinear out{nullptr};
  Norm q_norm{nullptr}, k_norm{nullptr};  // model.qk_layernorm: over each head's channels

 private:
  struct Heads {
    torch::Tensor q, k, v;  // [b, heads, s, d] and [b, groups, s, d]
  };
  // x's queries, keys and values, the queries and keys normalised (model.qk_layernorm) and
  // rotated with RoPE at `positions` ([n] or [b, n]; undefined: this rank's context-parallel
  // chunks of the sequence, as in training).
  Heads project(const torch::Tensor& x, const torch::Tensor& positions);
  torch::Tensor output(const torch::Tensor& context);  // [b, heads, s, d] -> [b, s, h]

  int64_t local_groups_, heads_per_group_, head_dim_;
  bool fused_kernels_;
  std::optional<Rotary> rotary_;
  double dropout_;
  bool recompute_core_;
  ContextParallel cp_;
  std::shared_ptr<DropoutStreams> streams_;
  RecomputedFunction core_;  // the attention core, kept for recomputation in backward
};
TORCH_MODULE(SelfAttention);

// GELU: down(gelu(up x)). SwiGLU (Shazeer 2020): down(silu(gate x) * up x), gate and up each
// column-parallel (ffn / t rows per rank), taking one gathered input.
class MLPImpl : public torch::nn::Module {
 public:
  // Of width `ffn` (the dense MLP's, or a Mixture-of-Experts layer's shared expert's).
  MLPImpl(const ModelConfig& config, const TensorParallel& tp, int64_t ffn);
  torch::Tensor forward(const torch::Tensor& x);
  ColumnParallelLinear gate{nullptr}, up{nullptr};  // gate: SwiGLU only
  RowParallelLinear down{nullptr};

 private:
  bool fused_kernels_;
};
TORCH_MODULE(MLP);

// The built-in block (model.block=transformer): x + attn(ln_1 x), then + mlp(ln_2 x), with
// dropout after each.
class BlockImpl : public TransformerBlock {
 public:
  explicit BlockImpl(const BlockContext& context);
  // In eval mode, with the attention's cache (SelfAttentionImpl::forward_cached).
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& positions, torch::Tensor& keys,
                               torch::Tensor& values) override;
  Norm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention attn{nullptr};
  MLP mlp{nullptr};  // or, in a Mixture-of-Experts layer (ModelConfig::moe_layer), moe
  MLP shared_expert{nullptr};  // beside moe, when the model has one
  MoE moe{nullptr};

 private:
  torch::Tensor compute(const torch::Tensor& x, const Documents& documents) override;
  torch::Tensor feed_forward(const torch::Tensor& x);  // mlp's or moe's
  double hidden_dropout_;
  RandomStream* hidden_stream_;  // model-parallel with sequence parallelism, else replicated
};

// The part of the model a pipeline stage (or one of its interleaved chunks) holds: contiguous
// layers; the embeddings on the first, final norm and head on the last. With a tied head the
// last stage of a pipeline keeps its own copy of the embedding (same name, same initial values)
// whose gradient is summed with the first stage's.
struct Stage {
  int64_t first_layer = 0;
  int64_t num_layers = -1;  // -1: all layers
  bool embedding = true;
  bool head = true;

  // Virtual stage `index` of `count` (count = pp_size * virtual_stages) holding `layers`
  // (core/layout.h's chunk_layers).
  static Stage of(int64_t index, int64_t count, LayerRange layers) {
    return {layers.first, layers.count, index == 0, index == count - 1};
  }
  // Where the chunk starts when the embedding counts as the slot before layer 0: distinct for
  // every chunk, even for an embedding-only chunk and the next one, which share first_layer.
  int64_t first_slot() const { return first_layer + (embedding ? 0 : 1); }
  // The tied embedding this stage holds (when the head is tied): none when it holds both ends.
  Tied tied_embedding() const { return embedding && head ? Tied::no : embedding ? Tied::owner : Tied::copy; }
};

class GPTImpl : public torch::nn::Module {
 public:
  // `vocab` is the padded vocabulary (rows of the embedding and the head, over all TP ranks).
  // With context parallelism every sequence arrives as this rank's chunks of it
  // (parallel/context_parallel.h), the positions are theirs.
  GPTImpl(const ModelConfig& config, int64_t vocab, TensorParallel tp = {}, Stage stage = {},
          Recompute recompute = Recompute::none, ContextParallel cp = {}, ExpertParallel ep = {});

  // Tokens [b, s/c] int64 on the first stage, else the previous stage's activations
  // [b, s/c(/t with SP), h] -> logits [b, s/c, vocab / t] on the last stage (this rank's
  // vocabulary slice), else activations for the next stage.
  // `documents`: packed documents kept apart (Documents).
  torch::Tensor forward(const torch::Tensor& input, const Documents& documents = {});
  // Inference on a whole model in one process: tokens [b, n] that follow the `cache.tokens`
  // ones `cache` holds -> their logits [b, n, vocab], the cache extended by them. The positions
  // must stay below model.seq_length.
  torch::Tensor forward_cached(const torch::Tensor& input, KvCache& cache);
  // Mean next-token cross-entropy, computed in at least fp32, over the whole vocabulary; with
  // `loss_mask` ([b, s/c], 1 where a token counts, 0 where not) the tokens that do not count add
  // zero to the mean (the trainer rescales it to the tokens that count, trainer.cpp).
  // `token_loss` replaces the cross-entropy when given.
  torch::Tensor loss(const torch::Tensor& input, const torch::Tensor& targets, const Documents& documents = {},
                     const torch::Tensor& loss_mask = {}, const TokenLoss& token_loss = {});

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
  void gather_weights_through(std::shared_ptr<UnitWeights> weights) { gathered_ = std::move(weights); }

  const TensorParallel& tensor_parallel() const { return tp_; }
  const Stage& stage() const { return stage_; }
  // What this chunk's blocks added to the objective besides the token loss.
  AuxiliaryLosses& auxiliary_losses() { return *auxiliary_; }
  // Where its Mixture-of-Experts layers record their load (null for a model without experts).
  ExpertLoad* expert_load() const { return expert_load_.get(); }
  // The routing bias of every layer (null unless model.moe_router_enable_expert_bias).
  ExpertBias* expert_bias() const { return expert_bias_.get(); }

  VocabParallelEmbedding wte{nullptr};  // on the first stage; on the last too when tied to the head
  PositionEmbedding wpe{nullptr};        // learned positions only
  // model.block's (model/block.h), registered as "h<global layer index>"
  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  Norm ln_f{nullptr};
  VocabParallelEmbedding lm_head{nullptr};  // an untied head's own weights, [vocab / t, h]

  const ModelConfig& config() const { return config_; }

 private:
  // The output head's weights on the last stage: lm_head's, or the tied embedding's.
  const torch::Tensor& head_weight() const { return lm_head ? lm_head->weight : wte->weight; }

  ModelConfig config_;
  TensorParallel tp_;
  Stage stage_;
  ContextParallel cp_;
  ExpertParallel ep_;
  uint64_t seed_ = 0;
  std::shared_ptr<DropoutStreams> streams_ = std::make_shared<DropoutStreams>();
  std::shared_ptr<AuxiliaryLosses> auxiliary_ = std::make_shared<AuxiliaryLosses>();
  std::shared_ptr<ExpertLoad> expert_load_;
  std::shared_ptr<ExpertBias> expert_bias_;
  std::shared_ptr<UnitWeights> gathered_;  // ZeRO-3
};
TORCH_MODULE(GPT);

}  // namespace trident
