// Activation checkpointing: LibTorch's C++ API has no torch.utils.checkpoint. A recomputed
// function runs without building a graph in forward and keeps only its inputs (and the states
// of the model's dropout streams, so dropout draws the same masks); backward re-runs it with
// gradients on, then
// back-propagates through the fresh graph. Collectives inside (tensor parallelism) run again in
// the same order on every rank. Inside a split backward's I (parallel/split_backward.h) the
// fresh graph is split too: its weights' gradients wait for the W.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

#include "model/dropout.h"

namespace trident {

using RecomputedFunction = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

// `function` and `streams` (the dropout streams it draws from) must outlive the backward pass
// (a module's own members are).
torch::Tensor recompute(const RecomputedFunction& function, const std::vector<torch::Tensor>& inputs,
                        DropoutStreams& streams);

}  // namespace trident
