// A pipeline schedule as data: for each pipeline rank, the compute actions it runs in one
// iteration, in order. A small generator per parallel.schedule writes them; a file can too
// (schedule_file.h); check_pipeline_schedule proves any of them complete and free of deadlock
// before a run starts; parallel/pipeline.h runs them all, one way.
//
// The actions (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", split the backward in two):
//   F  forward of one micro-batch through one virtual stage
//   B  its backward, both gradients at once
//   I  the backward to the stage's input alone (what the previous stage waits for)
//   W  the weights' gradients alone, after the I of the same stage and micro-batch
// written as torch.distributed.pipelining writes them: stage, letter, micro-batch ("3I0").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/layout.h"

namespace trident {

enum class ActionKind { forward, backward, input_grad, weight_grad };
char letter(ActionKind kind);  // F, B, I, W

struct PipelineAction {
  ActionKind kind = ActionKind::forward;
  int64_t stage = 0;  // the virtual stage: the model's chunks in order (Layout::virtual_stage)
  int64_t micro = 0;
  bool operator==(const PipelineAction& other) const {
    return kind == other.kind && stage == other.stage && micro == other.micro;
  }
  bool operator!=(const PipelineAction& other) const { return !(*this == other); }
};
std::string to_string(const PipelineAction& action);  // "3I0"

struct PipelineSchedule {
  int64_t micro_batches = 1;
  std::vector<int64_t> rank_of_stage;                // per virtual stage, the rank that runs it
  std::vector<int64_t> chunk_of_stage;               // and which of that rank's chunks it is
  std::vector<std::vector<PipelineAction>> actions;  // per rank, in the order it runs them

  int64_t ranks() const { return int64_t(actions.size()); }
  int64_t stages() const { return int64_t(rank_of_stage.size()); }
};

// The placement of `layout`'s chunks (Layout::virtual_stage) with no actions yet.
PipelineSchedule placed_schedule(const Layout& layout);

// The actions of `layout.schedule` for layout.micro_batches micro-batches over layout.pp_size
// ranks of layout.virtual_stages chunks each:
//   gpipe             every forward, then every backward
//   1f1b              p - r - 1 forwards, then one forward and one backward in turn (Narayanan et al. 2021)
//   interleaved_1f1b  Megatron's order over v chunks per rank: 2 (p - r - 1) + (v - 1) p warm-up forwards
//   zb-h1             1F1B with I for B and each W deferred r micro-batches (at most p micro-batches
//                     held on any rank, as 1F1B's first stage)
//   zb-v              two chunks per rank in a V, I and W split (Qi et al. 2024, section 6)
//   dualpipe-v        the same V in DualPipe-V's order (DeepSeek-V3 2024), most backwards whole; M >= 2p
PipelineSchedule make_pipeline_schedule(const Layout& layout);

// Why `schedule`'s generator is not written for p ranks and M micro-batches (with
// least_virtual_stages chunks), or "": two chunks per rank need p >= 2, Megatron's interleaved
// order M a multiple of p, DualPipe-V M >= 2p. Layout refuses such configs first, naming the keys.
std::string why_not_generated(Schedule schedule, int64_t p, int64_t m);

// Throws Error naming the first action at fault: a stage or micro-batch out of range or on
// another rank, a forward missing or repeated, a backward missing or both whole and split, a W
// before its I; and, by simulating the schedule, a deadlock (each stuck rank's action and what
// it waits for). `origin` names the schedule in the message ("parallel.schedule_file x.csv").
void check_pipeline_schedule(const PipelineSchedule& schedule, const std::string& origin);

}  // namespace trident
