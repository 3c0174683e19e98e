// Pipeline parallelism's runner: one iteration of a schedule (core/schedule/pipeline_schedule.h:
// GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V, DualPipe-V or a file's) on this rank. The schedule is data;
// this runs its steps (core/schedule/pipeline_program.h): each compute action through the
// stage's callback, each exchange posted to the pipeline group as it comes and waited for only
// when what it brings is needed, and the data-parallel reduction armed where the program says.
// A split backward's I and W (parallel/split_backward.h) run where the schedule puts them.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/schedule/pipeline_program.h"
#include "core/schedule/pipeline_schedule.h"
#include "parallel/comm/communicator.h"

namespace trident {

struct PipelineOptions {
  PipelineSchedule schedule;              // checked with check_pipeline_schedule
  int rank = 0;                           // this rank's place in the pipeline
  std::vector<ProgramStep> program;       // its steps, rank_program(schedule, rank): made once
  std::vector<int64_t> activation_shape;  // what travels between stages: [b, s(/t), h]
  torch::TensorOptions activation_options;
};

// The options of pipeline rank `rank` for `schedule` (checked), with its program.
PipelineOptions pipeline_options(PipelineSchedule schedule, int rank, std::vector<int64_t> activation_shape,
                                 torch::TensorOptions activation_options);

struct PipelineStats {
  int64_t max_in_flight = 0;  // chunk forwards whose activations are held (until B or W), at the peak
  double transfer_ms = 0;     // time waiting for exchanges: the bubble, on a CPU
  // Each compute action as it ran on the host, from the iteration's start (on a GPU: when it was
  // launched): the measured timeline (tools/pipeline_bubble.cpp draws it).
  struct Timed {
    PipelineAction action;
    double start_ms = 0, end_ms = 0;
  };
  std::vector<Timed> actions;
};

// The stage's own work: model chunk `chunk` (of this rank's) on micro-batch `micro`. `input` is
// the previous virtual stage's activation (a fresh leaf that will receive its gradient;
// undefined for the model's first layers); it returns the activation for the next virtual stage
// or, for the model's last layers, the loss already scaled by 1/M.
using PipelineForward =
    std::function<torch::Tensor(int64_t chunk, int64_t micro, const torch::Tensor& input)>;

// Runs forward and backward of every micro-batch of one iteration on this stage. `arm` runs once
// before the iteration's last gradient actions (to start data-parallel reduction during them),
// unless the rank's last gradient action is of an earlier micro-batch (a file's order may be).
// A micro-batch's activations are released once its B, or its W, is done.
PipelineStats run_pipeline(Communicator& pipeline, const PipelineOptions& options,
                           const PipelineForward& forward, const std::function<void()>& arm);

// Forward passes only (validation), micro-batch by micro-batch through the virtual stages.
void run_pipeline_forward(Communicator& pipeline, const PipelineOptions& options,
                          const PipelineForward& forward);

}  // namespace trident
