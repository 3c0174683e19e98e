// Pipeline schedules (Narayanan et al. 2021): GPipe (all forwards, then all backwards) and
// 1F1B (warm-up of p - rank - 1 forwards, then one forward / one backward, then cool-down).
// The stage's own work comes in as a callback; the schedule moves activations forward and
// their gradients backward between neighbouring stages, in exchanges that cannot deadlock.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace trident {

struct PipelineOptions {
  std::string schedule = "1f1b";         // gpipe | 1f1b
  int64_t micro_batches = 1;             // M
  std::vector<int64_t> activation_shape; // what travels between stages: [b, s(/t), h]
  torch::TensorOptions activation_options;
};

struct PipelineStats {
  int64_t max_in_flight = 0;  // micro-batches forwarded and not yet backwarded, at the peak
  double transfer_ms = 0;     // time in point-to-point exchanges: waiting for neighbours included
};

// Runs model work `forward(micro, input)` on micro-batch `micro`: `input` is the previous
// stage's activation (a fresh leaf that will receive its gradient; undefined on the first
// stage); it returns the activation for the next stage or, on the last stage, the loss already
// scaled by 1/M. `before_last_backward` runs once, right before the iteration's last backward on
// this stage (to start data-parallel gradient reduction then). Activations of a micro-batch are
// released as soon as its backward is done.
PipelineStats run_pipeline(
    Communicator& pipeline, const PipelineOptions& options,
    const std::function<torch::Tensor(int64_t micro, const torch::Tensor& input)>& forward,
    const std::function<void()>& before_last_backward);

// Forward passes only (validation), micro-batch by micro-batch.
void run_pipeline_forward(
    Communicator& pipeline, const PipelineOptions& options,
    const std::function<torch::Tensor(int64_t micro, const torch::Tensor& input)>& forward);

}  // namespace trident
