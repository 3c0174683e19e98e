// Pipeline schedules (Narayanan et al. 2021): GPipe (all forwards, then all backwards), 1F1B
// (warm-up of p - rank - 1 forwards, then one forward / one backward, then cool-down) and
// interleaved 1F1B (v model chunks per stage, bubble (p-1)/(vM)).
// The stage's own work comes in as a callback; the schedule moves activations forward and
// their gradients backward between neighbouring stages, in exchanges that cannot deadlock.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "parallel/comm/communicator.h"

namespace trident {

struct PipelineOptions {
  Schedule schedule = Schedule::one_f_one_b;
  int64_t micro_batches = 1;             // M
  int64_t virtual_stages = 1;            // v model chunks per stage (interleaved only)
  std::vector<int64_t> activation_shape; // what travels between stages: [b, s(/t), h]
  torch::TensorOptions activation_options;
};

struct PipelineStats {
  int64_t max_in_flight = 0;  // micro-batches forwarded and not yet backwarded, at the peak
  double transfer_ms = 0;     // time in point-to-point exchanges: waiting for neighbours included
};

// The stage's own work: model chunk `chunk` (0 unless interleaved) on micro-batch `micro`.
// `input` is the previous virtual stage's activation (a fresh leaf that will receive its
// gradient; undefined for the model's first layers); it returns the activation for the next
// virtual stage or, for the model's last layers, the loss already scaled by 1/M.
using PipelineForward =
    std::function<torch::Tensor(int64_t chunk, int64_t micro, const torch::Tensor& input)>;

// Runs forward and backward of every micro-batch of one iteration on this stage.
// `before_last_backward` runs once, right before the iteration's last backward on this stage
// (to start data-parallel gradient reduction then). Activations of a micro-batch are released
// as soon as its backward is done.
PipelineStats run_pipeline(Communicator& pipeline, const PipelineOptions& options,
                           const PipelineForward& forward,
                           const std::function<void()>& before_last_backward);

// Forward passes only (validation), micro-batch by micro-batch.
void run_pipeline_forward(Communicator& pipeline, const PipelineOptions& options,
                          const PipelineForward& forward);

}  // namespace trident
