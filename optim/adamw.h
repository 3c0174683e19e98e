// AdamW with decoupled weight decay (Loshchilov & Hutter 2019) from LibTorch, in two parameter
// groups: matrices and embeddings decay, biases and LayerNorm parameters (1-D) do not.
#pragma once

#include <torch/optim/adamw.h>

#include <memory>
#include <vector>

#include "core/config.h"

namespace trident {

std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<torch::Tensor>& params,
                                                const OptimizerConfig& config);

void set_learning_rate(torch::optim::AdamW& optimizer, double lr);

}  // namespace trident
