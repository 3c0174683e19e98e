// How evenly a Mixture-of-Experts model's tokens spread over its experts, per iteration, for the
// log and the metrics file: each MoE layer records, where gradients are taken (once per
// micro-batch, as the auxiliary losses are), how many of its token assignments each expert took
// and how many a capacity dropped (model/moe.h). A model chunk holds one for its layers; the
// trainer sums them over the job (train/expert_balance.h).
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace trident {

class ExpertLoad {
 public:
  // For a model of `layers` layers (global indices) with `experts` experts each.
  ExpertLoad(int64_t layers, int64_t experts);
  // Before an iteration's first forward: every count zero.
  void begin_iteration();
  // Layer `layer`'s routing of one micro-batch: `taken` [experts] assignments each expert took,
  // `dropped` (a scalar) those its capacity dropped.
  void record(int64_t layer, const torch::Tensor& taken, const torch::Tensor& dropped);
  // [layers, experts + 1] fp64 on the records' device: per layer, what each expert took, then
  // what was dropped; undefined before the first record of the run.
  const torch::Tensor& counts() const { return counts_; }

 private:
  int64_t layers_, experts_;
  torch::Tensor counts_;
};

}  // namespace trident
