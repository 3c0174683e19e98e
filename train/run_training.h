// The main of a program that trains, as the `train` program's: the config made and checked on
// every rank, a mistake in it reported once (by rank 0, after the ranks have connected and agreed
// on it, whichever ranks found it), stop signals that save before exiting, then training.
#pragma once

#include <functional>

#include "core/config.h"
#include "parallel/comm/launch.h"
#include "train/trainer.h"

namespace trident {

// The checks a config gets before a job connects: its layout at the world size of `launch`, its
// backend, and the family train.init_from reads. Throws Error.
void check_training_config(const LaunchInfo& launch, const Config& config);

// Makes the config with `make_config` and checks it (check_training_config), joins
// the job and agrees on the outcome, installs the stop signals, builds the Trainer (on the
// program's samples when `source` is given: data.type=program), lets `prepare` set hooks (or
// anything else) on it, and trains. Returns the exit code: train()'s, or report_failure's for a
// failure (which has ended the job).
int run_training(const LaunchInfo& launch, const std::function<Config()>& make_config,
                 const std::function<void(Trainer&)>& prepare = {}, const SampleSource* source = nullptr);

}  // namespace trident
