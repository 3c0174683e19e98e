// Transformer blocks by name: the built-in one ("transformer": GPT-2's or Llama's, as the other
// model.* keys say) and those a program registers (register_block), chosen by model.block.
// A block is built from trident's parallel layers (parallel/tensor_parallel.h, model/layers.h,
// SelfAttention and MLP in model/gpt.h), whose parameters carry their roles
// (parallel/parameter_role.h): that is all the pipeline, ZeRO-3, initialisation, recomputation
// and any-layout checkpoints need of it (docs/library.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/auxiliary_loss.h"
#include "model/dropout.h"
#include "model/expert_bias.h"
#include "model/expert_load.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/parameter_role.h"
#include "parallel/tensor_parallel.h"

namespace trident {

// Documents packed into one sequence (data.reset_attention_mask, data.reset_position_ids): an
// undefined member keeps the default, one document over the whole sequence.
struct Documents {
  torch::Tensor ids;        // [b, s] int64: each token's document, over the whole sequence (every
                            // context-parallel rank holds all of it); attention stays within one
  torch::Tensor positions;  // [b, s / c] int64: this rank's tokens' positions, restarting per document
  bool any() const { return ids.defined() || positions.defined(); }
};

// What a block is built with: the model's shape, its tensor- and context-parallel groups, the
// recomputation asked for, the chunk's dropout streams, the block's global layer index and where
// it hands auxiliary losses (model/auxiliary_loss.h).
// `config` refers to the model's own copy, which lives as long as the block.
struct BlockContext {
  const ModelConfig& config;
  TensorParallel tp;
  Recompute recompute;
  ContextParallel cp;
  std::shared_ptr<DropoutStreams> streams;
  int64_t layer;
  std::shared_ptr<AuxiliaryLosses> auxiliary;
  ExpertParallel ep = {};  // the Mixture-of-Experts MLP's group (model/moe.h)
  std::shared_ptr<ExpertLoad> expert_load = nullptr;  // where MoE layers record their load
  std::shared_ptr<ExpertBias> expert_bias = nullptr;  // DeepSeek-V3's routing bias, when enabled
};

// The base of every block: [b, s/c(/t with SP), h] -> the same shape. With recompute=full the
// base recomputes the whole of compute() in backward (model/recompute.h), drawing the same
// dropout masks; anything finer (recompute=selective) is the block's own business. A block is a
// ParallelModule: a parameter of its own (a gate, a scale) is registered with its role.
class TransformerBlock : public ParallelModule {
 public:
  explicit TransformerBlock(const BlockContext& context);
  // The recomputation holds `this`.
  TransformerBlock(const TransformerBlock&) = delete;
  TransformerBlock& operator=(const TransformerBlock&) = delete;

  torch::Tensor forward(const torch::Tensor& x, const Documents& documents = {});
  // One generation step with the attention's key/value cache (model/gpt.h's KvCache); a block
  // without one refuses.
  virtual torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& positions, torch::Tensor& keys,
                                       torch::Tensor& values);

 protected:
  virtual torch::Tensor compute(const torch::Tensor& x, const Documents& documents) = 0;
  std::shared_ptr<DropoutStreams> streams_;

 private:
  bool recompute_;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> compute_;  // kept for backward
};

// The stream for dropout between the layers: split along the sequence over TP ranks with
// sequence parallelism (masks of their own), else whole on each (the same masks).
RandomStream& hidden_stream(DropoutStreams& streams, const TensorParallel& tp);

using BlockFactory = std::function<std::shared_ptr<TransformerBlock>(const BlockContext& context)>;

// Makes model.block=`name` build blocks with `factory` in this program (before its Trainer is
// built). Refuses an empty name, "transformer" and a name already registered.
void register_block(const std::string& name, BlockFactory factory);
// Names model.block may take in this program.
std::vector<std::string> registered_blocks();
// Fails naming model.block and the registered names when `name` is not one of them (the
// Trainer checks before building anything heavy).
void check_block_registered(const std::string& name);
// The block of context.config.block for layer context.layer.
std::shared_ptr<TransformerBlock> make_block(const BlockContext& context);

}  // namespace trident
