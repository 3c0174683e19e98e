// A pipeline schedule run on paper. Each rank takes its actions in order; an action starts once
// its rank is free and what it needs is done (the previous stage's F of its micro-batch; for I
// or B the next stage's I or B and its own F; for W its I), and lasts its kind's cost. Transfers
// cost nothing. This gives when every action runs, each rank's idle time (the bubble), the
// activations each rank holds at most, and, when the ranks stop with actions left, the deadlock.
#pragma once

#include <string>
#include <vector>

#include "core/schedule/pipeline_schedule.h"

namespace trident {

// Qi et al. 2024 time T_F, T_B and T_W alike; a whole backward (B) costs I + W.
struct ActionCosts {
  double forward = 1, input_grad = 1, weight_grad = 1;
  double of(ActionKind kind) const;
};

struct ActionTime {
  double start = 0, end = 0;
};

struct PipelineTimeline {
  std::vector<std::vector<ActionTime>> times;  // per rank, per action
  double makespan = 0;                         // the last action's end
  std::vector<double> busy;                    // per rank, time computing
  // Per rank, the most micro-batches whose activations it holds at once (from an F's start to
  // the end of its B or W), a chunk counting for its share of the rank's chunks.
  std::vector<double> held_peak;
  std::string deadlock;  // empty unless the ranks stop with actions left: what each waits for

  // The share of the iteration rank `rank` spends idle.
  double bubble(int64_t rank) const { return makespan > 0 ? 1 - busy[size_t(rank)] / makespan : 0; }
};

PipelineTimeline simulate_pipeline(const PipelineSchedule& schedule, const ActionCosts& costs = {});

// `layout`'s schedule (make_pipeline_schedule) on paper with a stage's costs, each chunk of
// layout.virtual_stages costing its share: the bubble in stage times (the iteration less M stage
// times, F + I + W each, over one stage time: 1F1B's p - 1, interleaved 1F1B's (p - 1) / v) and
// the most micro-batches a rank holds at once (1F1B's min(p, M)). Remembered per layout and costs
// (the planner asks for many).
struct ScheduleShape {
  double bubble_stage_times = 0;
  double held_micro_batches = 0;
};
ScheduleShape schedule_shape(const Layout& layout, const ActionCosts& stage_costs);

// The timeline as text, one line per rank and two characters per unit of time: each action its
// letter and micro-batch (lower case on a rank's second chunk, B over two units), idle time dots.
//
//   rank 0  F0F1F2F3I0W0F4I1W1...
std::string render_timeline(const PipelineSchedule& schedule, const PipelineTimeline& timeline);

}  // namespace trident
