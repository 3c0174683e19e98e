// AdamW with decoupled weight decay (Loshchilov & Hutter 2019), the update torch.optim.AdamW
// makes, applied to flat slices of parameters: matrices and embeddings decay, biases and
// LayerNorm parameters (1-D) do not.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "core/config.h"

namespace trident {

// One contiguous slice of parameters with its gradient and moments (all of equal length).
struct AdamWSlice {
  torch::Tensor param, grad, exp_avg, exp_avg_sq;
  std::vector<std::pair<int64_t, int64_t>> decayed;  // (offset, length) runs that decay
};

// One AdamW update of every slice; `step` counts updates, this one included (bias correction).
void adamw_update(std::vector<AdamWSlice>& slices, const OptimizerConfig& config, double lr,
                  int64_t step);

}  // namespace trident
