#include "train/stop_agreement.h"

#include "train/stop_signals.h"

namespace trident {

StopVote agree_on_stop(Communicator& world, const StopVote& mine) {
  auto flags = torch::tensor({int64_t(mine.signal), int64_t(mine.requested), int64_t(mine.writing)}, torch::kLong);
  world.all_reduce(flags, ReduceOp::max);
  return {int(flags[0].item<int64_t>()), flags[1].item<int64_t>() != 0, flags[2].item<int64_t>() != 0};
}

int agreed_stop(const StopVote& agreed) { return agreed.signal != 0 ? agreed.signal : agreed.requested ? kStopRequested : 0; }

TrainingEnd stopped_by(int stop) {
  if (stop == kStopRequested) return {false, "request_stop()", 0};
  if (stop == kTimeLimit) return {false, "train.exit_after_minutes", 3};
  return {false, signal_name(stop), 128 + stop};
}

}  // namespace trident
