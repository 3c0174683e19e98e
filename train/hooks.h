// What a program adds to train(): calls at fixed points of the loop, and its own loss. Every
// member is optional; every rank must set the same ones. The hooks run on every rank (`loss` on
// the ranks of the last pipeline stage); what they decide together (a stop) is agreed at the
// end of the step. An exception thrown by a hook ends the job like any rank's failure
// (parallel/comm/failure.h): its cause, naming the hook and the iteration, printed first; in a
// job of one process it is thrown out of train() as trident::Error instead.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/gpt.h"
#include "train/metrics.h"

namespace trident {

// train() calls every hook; step() calls before_step and after_step; save_checkpoint() calls
// before_save and after_save.
struct Hooks {
  // Before iteration `iteration` (1, 2, ...) runs.
  std::function<void(int64_t iteration)> before_step;
  // After each iteration, with its numbers read from the device (which makes the host wait for
  // each step): add to `m.scalars` to log more values (the log line, train.metrics_file and
  // train.tensorboard_dir), from any rank: they are gathered after it (train/program_scalars.h).
  std::function<void(IterationMetrics& m)> after_step;
  // After a validation, with the iteration's numbers (m.valid_loss, and m.valid_losses for a blend).
  std::function<void(const IterationMetrics& m)> after_validation;
  // Around each checkpoint save of iteration `iteration` into `folder` (collective on every rank).
  std::function<void(int64_t iteration, const std::string& folder)> before_save, after_save;
  // Replaces next-token cross-entropy in training and validation (model/gpt.h's TokenLossInput
  // says what it gets).
  TokenLoss loss;
};

// Runs the program's hook `name` at `iteration`: what it throws ends the job of `world_size`
// ranks (parallel/comm/failure.h), or in a job of one is thrown as Error naming the hook.
void run_hook(const char* name, int64_t iteration, int64_t world_size, const std::function<void()>& call);

}  // namespace trident
