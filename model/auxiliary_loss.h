// Losses a block adds to the objective beside the token loss: a router's load-balancing loss,
// an activation penalty. A block hands its loss over in compute():
//
//   return context.auxiliary->add(output, "load_balancing", balance_loss, 0.01);
//
// The loss never travels through the pipeline: its gradient is attached to the block's output
// (as Megatron's MoEAuxLossAutoScaler does), so backward through this block trains with
// coefficient x loss added to the objective, on whichever stage the block lives. Like the token
// loss, it counts as the mean over the iteration's micro-batches (times fp16's loss scale), and
// data- and context-parallel ranks average it as they average gradients; a loss that is a mean
// over the rank's tokens therefore trains as the same mean over the global batch would.
// Recorded only where gradients are taken (not in validation; with recompute=full, once, in the
// backward's replay), for the log's aux/<name> values: each one's share of the objective, summed
// over the model's layers.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

namespace trident {

// Makes `name` an auxiliary loss blocks may add (before the Trainer is built, on every rank, as
// register_block). Refuses an empty name, a name with characters other than letters, digits and
// '_', and one declared already.
void declare_auxiliary_loss(const std::string& name);
// The declared names, in the order they were declared (the order of the log's values).
std::vector<std::string> declared_auxiliary_losses();

// One model chunk's auxiliary losses (GPTImpl holds one and hands it to its blocks).
class AuxiliaryLosses {
 public:
  // `output` as it is, with coefficient x `loss` (a scalar, floating) joining the objective.
  // Error naming `name` when it was not declared or `loss` is not a scalar.
  torch::Tensor add(const torch::Tensor& output, const std::string& name, const torch::Tensor& loss,
                    double coefficient);
  // Before an iteration's first forward: what the token loss's gradient carries per unit of a
  // micro-batch's loss (1 / micro-batches, times fp16's loss scale), and the values zeroed.
  void begin_iteration(double backward_scale);
  // Per declared name, coefficient x loss summed over what this chunk added since
  // begin_iteration (on its device, in fp64); undefined before the first add.
  const torch::Tensor& values() const { return values_; }

 private:
  double backward_scale_ = 1;
  torch::Tensor values_;
};

}  // namespace trident
