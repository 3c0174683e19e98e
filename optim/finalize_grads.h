// The end of an iteration's backward, in one place (Megatron's finalize_model_grads): every
// gradient made what the optimizer steps on, as each parameter's role says, and the global norm.
#pragma once

#include <torch/types.h>

namespace trident {

class ProcessGroups;
class ParameterGroups;

// Waits for each group's data-parallel reductions, sums over the TP group the gradients of
// sequence-parallel parameters and over the embedding group those of the tied embedding, and
// returns the global gradient norm over every group (an fp64 scalar on the device, not read by
// the host): each element counted once over TP x PP, over the expert-parallel ranks' experts,
// and over the replicas where ZeRO shards the gradients.
torch::Tensor finalize_grads(ParameterGroups& optimizer, const ProcessGroups& groups);

}  // namespace trident
