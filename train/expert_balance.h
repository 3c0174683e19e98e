// The iteration's expert load for the log and the metrics file (model/expert_load.h): how evenly
// the router spread the global batch's tokens over the experts, and what capacity dropped.
// Each Mixture-of-Experts layer's counts are summed over the job: over the data- and
// context-parallel ranks (each routed tokens of its own) and the pipeline stages (each holds its
// layers'); tensor-parallel ranks count once (they route the same tokens).
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "model/gpt.h"

namespace trident {

class ProcessGroups;

// Collective over the world for a model with experts; an undefined tensor (and no communication)
// for one without. [layers, experts + 1] fp64 on `device` (ExpertLoad::counts).
torch::Tensor expert_load_counts(std::vector<GPT>& chunks, const ProcessGroups& groups, const torch::Device& device);
// From the summed counts (read from the device), for IterationMetrics: "load_imbalance", the
// largest over the Mixture-of-Experts layers of the most tokens an expert took over the mean
// (1: even), and with a capacity "dropped", the assignments it dropped. Empty for undefined counts.
std::vector<std::pair<std::string, double>> expert_balance_values(const torch::Tensor& counts, bool capacity);

}  // namespace trident
