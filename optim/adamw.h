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
  struct Run {
    int64_t offset, length;
    bool decay;
  };
  torch::Tensor param, grad, exp_avg, exp_avg_sq;
  std::vector<Run> runs;  // the parameters' elements in the slice (padding belongs to none)
};

// One AdamW update of every slice; `step` counts updates, this one included (bias correction).
// On CUDA with LibTorch 2.x: LibTorch's fused multi-tensor kernel (two launches, decayed runs
// and the rest); elsewhere a few whole-slice operations per slice.
void adamw_update(std::vector<AdamWSlice>& slices, const OptimizerConfig& config, double lr,
                  int64_t step);

}  // namespace trident
