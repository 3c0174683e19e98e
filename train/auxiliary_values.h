// The iteration's auxiliary losses for the log and the metrics file (model/auxiliary_loss.h):
// each declared one's share of the objective, summed over the model's layers (whichever pipeline
// stage holds them), the mean over the micro-batches, averaged over the data- and context-
// parallel ranks; tensor-parallel ranks count once (their blocks hand the same losses over).
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "model/gpt.h"

namespace trident {

class ProcessGroups;

// Collective over the world when any auxiliary loss is declared; an undefined tensor (and no
// communication) when none is. Per declared name, on `device`, fp64.
torch::Tensor auxiliary_values(std::vector<GPT>& chunks, const ProcessGroups& groups, int64_t micro_batches,
                               const torch::Device& device);
// The declared names beside `values` (read from the device), for IterationMetrics.
std::vector<std::pair<std::string, double>> named_auxiliary_values(const torch::Tensor& values);

}  // namespace trident
