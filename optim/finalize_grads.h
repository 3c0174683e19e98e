// The end of an iteration's backward, in one place (Megatron's finalize_model_grads): every
// gradient made what the optimizer steps on, as each parameter's role says, and the global norm.
#pragma once

#include <torch/types.h>

#include <vector>

#include "parallel/parameter_role.h"

namespace trident {

class ProcessGroups;
class ZeroOptimizer;

// Waits for the data-parallel reductions, sums over the TP group the gradients of
// sequence-parallel parameters and over the embedding group those of the tied embedding, and
// returns the global gradient norm (an fp64 scalar on the device, not read by the host): each
// element counted once over TP x PP (and over DP when ZeRO shards the gradients).
// `roles` in model order, the optimizer's parameters'.
torch::Tensor finalize_grads(ZeroOptimizer& optimizer, const ProcessGroups& groups,
                             const std::vector<ParameterRole>& roles);

}  // namespace trident
