// What one pipeline rank does in an iteration, step by step: its compute actions, the exchanges
// with other ranks between them, and the point where data-parallel reduction is armed.
//
// The exchanges come from one simulation of the whole schedule (pipeline_simulation.h) that
// every rank runs alike. A message (an activation to the next stage, a gradient to the
// previous) leaves when its action ends on paper, at time t; sender and receiver both post it
// in their exchange of time t, with whatever else crosses that rank at t. Each rank posts its
// exchanges in the order of t, before the first action that starts at or after t:
//
//   rank 0   F0 ─ [t=1: send act 1/0] ─ F1 ─ [t=2: send act 1/1] ─ ...
//   rank 1        [t=1: recv act 1/0] ─ F0 ─ [t=2: recv act 1/1, send grad 0/0] ...
//
// so two ranks post their shared exchanges in the same order: no backend deadlocks on them
// (NCCL runs a communicator's groups in turn; MPI and Gloo match messages in order), and an
// action never waits for a message that is posted after it.
#pragma once

#include <vector>

#include "core/schedule/pipeline_schedule.h"

namespace trident {

struct PipelineMessage {
  enum class Kind { activation, gradient } kind = Kind::activation;
  int64_t stage = 0;  // the stage it is for: an activation is its input, a gradient its output's
  int64_t micro = 0;
  int peer = 0;       // the rank at the other end
  bool send = false;  // this rank sends it (else receives it)
};

struct ProgramStep {
  enum class Type { compute, exchange, arm } type = Type::compute;
  PipelineAction action;                  // compute
  std::vector<PipelineMessage> messages;  // exchange
};

// Rank `rank`'s steps for a schedule that passes check_pipeline_schedule. The arm step comes
// right before the first gradient action (B, I or W) after which every gradient action is of
// the last micro-batch: from there each weight's gradient is added to once more at most.
std::vector<ProgramStep> rank_program(const PipelineSchedule& schedule, int64_t rank);

}  // namespace trident
