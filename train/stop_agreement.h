// How train() stops early, agreed by every rank at the end of an iteration: a stop signal
// (SIGTERM, SIGINT: train/stop_signals.h) on any rank, train.exit_after_minutes, or the
// program's request_stop(); and with it whether every rank has written the checkpoint being
// saved in the background (so that it can be published).
#pragma once

#include <cstdint>
#include <string>

#include "parallel/comm/communicator.h"

namespace trident {

// How train() ended: every iteration done, or stopped early, after saving a checkpoint (when
// train.checkpoint_dir is set).
struct TrainingEnd {
  bool completed = true;
  std::string stopped_by;  // "SIGTERM", "SIGINT", "train.exit_after_minutes", "request_stop()"
  // For a program to exit with: 0 when completed or stopped by request_stop(), 128 + the
  // signal's number (143 for SIGTERM, 130 for SIGINT, as a shell reports them), 3 at
  // train.exit_after_minutes.
  int exit_code = 0;
};

// A stop: a signal's number, or one of these (above every signal's number); 0 for none.
constexpr int kTimeLimit = 1000;      // train.exit_after_minutes
constexpr int kStopRequested = 1001;  // request_stop()

// What one rank says, and what the ranks agree on.
struct StopVote {
  int signal = 0;          // stop_signal(), or kTimeLimit
  bool requested = false;  // request_stop() was called
  bool writing = false;    // a background save is still writing this rank's files
};

// One small all-reduce (max) over `world`: the signal or time limit any rank saw, whether any
// rank asked to stop, whether any rank is still writing. Collective.
StopVote agree_on_stop(Communicator& world, const StopVote& mine);

// The stop the ranks agreed on: a signal or the time limit outranks the program's request (its
// exit code tells a scheduler why); 0 for none.
int agreed_stop(const StopVote& agreed);

// How train() ended for agreed stop `stop` (not 0).
TrainingEnd stopped_by(int stop);

}  // namespace trident
