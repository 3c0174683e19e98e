// DeepSeek-V3's auxiliary-loss-free load balancing (Wang et al. 2024): a bias per expert of every
// Mixture-of-Experts layer, added to the router's scores where the top k are chosen but not to
// the chosen experts' weights, and moved after every iteration by a fixed rate towards an even
// load: up for an expert that took fewer tokens than the mean, down for one that took more
// (Megatron-Core's moe_router_enable_expert_bias).
//
// Every rank holds the bias of every layer (layers x experts numbers) and moves it the same way,
// from the load summed over the whole job (train/expert_balance.h), so the ranks agree without
// exchanging it, and rank 0's copy goes into a checkpoint's progress.yaml whole.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace trident {

class ExpertBias {
 public:
  // Zero for `layers` layers (global indices) of `experts` experts, moved by `rate` per iteration.
  ExpertBias(int64_t layers, int64_t experts, double rate);
  // Layer `layer`'s bias [experts] on `device`, fp64.
  torch::Tensor of_layer(int64_t layer, const torch::Device& device);
  // After an iteration: `counts` [layers, experts + 1] the tokens each expert of each layer was
  // routed (the last column, what a capacity dropped, is not load), summed over the job. Layers
  // without tokens (dense ones, or none routed) stay as they are.
  void update(const torch::Tensor& counts);
  // Every layer's bias, flattened (layer-major), for a checkpoint; and back.
  std::vector<double> values() const;
  void restore(const std::vector<double>& values);

 private:
  int64_t layers_, experts_;
  double rate_;
  torch::Tensor bias_;  // [layers, experts], fp64, on the device of the last use
};

}  // namespace trident
