// A Mixture-of-Experts MLP (Shazeer et al. 2017; Switch, GShard and Mixtral's routing), the MLP
// of layers where ModelConfig::moe_layer says so. A router of E x h weights gives each token a
// score (logit) per expert; its top-k experts by score (k = moe_router_topk) take it, weighted by
// the softmax over those k scores (Mixtral's renormalised top-k; with moe_router_pre_softmax
// their probabilities of the softmax over all E, as Qwen3-MoE's norm_topk_prob=false), or with
// moe_router_score_function=sigmoid by their sigmoids normalised to sum to 1 (DeepSeek-V3), times
// moe_router_topk_scaling_factor when set; with moe_router_enable_expert_bias a per-expert bias
// (model/expert_bias.h) joins the scores where the top k are chosen. Each expert is an MLP of
// model.activation and width moe_ffn, without biases; the token's output is the weighted sum.
//
// Expert parallelism deals the experts out to the ep ranks of the expert-parallel group, E / ep
// consecutive ones each (parallel/expert_parallel.h moves the tokens to them and back), and
// tensor parallelism splits each expert's width as it splits the dense MLP's: its gate and up
// rows, its down columns
//
//   gate, up [E/ep, f/t, h]    down [E/ep, h, f/t]    router [E, h], whole on every rank
//
// so the partial outputs of all experts meet in one all-reduce (or, with sequence parallelism,
// one reduce-scatter after one all-gather of the tokens and their routing). Each
// tensor-parallel rank exchanges the same tokens with its expert-parallel peers of the same
// tensor-parallel rank (Megatron's expert TP = TP). Dropless: every expert takes all its tokens
// (model/expert_multiply.h: one grouped multiply on a Hopper GPU in bf16, a loop over experts
// elsewhere), unless model.moe_expert_capacity_factor caps each expert at
// ceil(factor x T x k / E) of a micro-batch's T tokens' assignments, its most
// probable ones by the router's softmax over all E (Switch's and GShard's capacity, Megatron's
// "probs" drop policy), decided over the whole micro-batch whichever ranks hold its tokens.
// Each layer records its load per expert and what it dropped (model/expert_load.h).
//
// Two losses join the objective through the block's auxiliary losses (model/auxiliary_loss.h),
// each when its coefficient is above zero, over the same tokens as one process would use (the
// micro-batch's, across sequence- and context-parallel ranks):
//   moe_load_balancing  E / (k T^2) sum_e (sum over tokens of p_e) (tokens routed to e)
//                       (Switch/GShard's, as Megatron-Core writes it; p the softmax over all E)
//   moe_z               mean over tokens of logsumexp(router logits)^2 (ST-MoE's router z-loss)
#pragma once

#include <torch/types.h>

#include <memory>

#include "model/auxiliary_loss.h"
#include "model/block.h"
#include "model/expert_bias.h"
#include "model/expert_load.h"
#include "model/layers.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/parameter_role.h"
#include "parallel/tensor_parallel.h"

namespace trident {

// The two losses' names, declared once per process for a model with experts and coefficients
// above zero (GPTImpl does it before its first block, on every rank, as every stage must agree).
void declare_moe_losses(const ModelConfig& config);

class MoEImpl : public ParallelModule {
 public:
  explicit MoEImpl(const BlockContext& context);
  torch::Tensor forward(const torch::Tensor& x);  // [b, s/c(/t with SP), h] -> the same
  torch::Tensor router, gate, up, down;           // gate: SwiGLU only

 private:
  struct Routed {
    torch::Tensor output;   // [T, h], this rank's part of the width (summed over TP afterwards)
    torch::Tensor dropped;  // assignments no expert took (over capacity)
  };
  // The experts' partial outputs for tokens [T, h] routed to the experts `chosen` [T, k] (E for
  // an assignment dropped) with `weights` [T, k]. Moves the counts to the host: one
  // synchronisation per layer on a GPU. Collective over the expert-parallel group.
  Routed experts(const torch::Tensor& tokens, const torch::Tensor& chosen, const torch::Tensor& weights);
  // Each token's k experts [T, k] (the top k by score, the bias added when there is one) and
  // their weights [T, k]: the softmax over their logits (over all logits, pre-softmax), or their
  // sigmoids normalised to sum to 1, times the scaling factor when there is one.
  std::pair<torch::Tensor, torch::Tensor> route(const torch::Tensor& logits);
  // Each token's probability per expert [T, E] (the balancing loss's and the capacity's): the
  // softmax over the logits, or the sigmoids normalised to sum to 1.
  torch::Tensor probabilities(const torch::Tensor& logits) const;
  // Which of `chosen` [T, k] with their routing probabilities the capacity keeps: decided over
  // the micro-batch's tokens (across the context-parallel ranks), as one process would.
  torch::Tensor kept_assignments(const torch::Tensor& chosen, const torch::Tensor& probability);
  // Both losses for this rank's router logits [T, E] and `routed`, the experts' token counts
  // over the sequence-parallel ranks' tokens (the experts see them all).
  torch::Tensor with_losses(const torch::Tensor& output, const torch::Tensor& logits, torch::Tensor routed);

  int64_t num_experts_, topk_;
  double aux_loss_coeff_, z_loss_coeff_;
  double capacity_factor_;  // 0: dropless
  double scaling_factor_;   // 0: none
  RouterScore score_function_;
  bool pre_softmax_;
  int64_t layer_;
  bool fused_kernels_;
  TensorParallel tp_;
  ContextParallel cp_;
  ExpertParallel ep_;
  std::shared_ptr<AuxiliaryLosses> auxiliary_;
  std::shared_ptr<ExpertLoad> load_;  // null: not recorded
  std::shared_ptr<ExpertBias> bias_;  // null: no bias
};
TORCH_MODULE(MoE);

}  // namespace trident
