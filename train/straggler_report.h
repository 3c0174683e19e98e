// The straggler report of a job of several ranks, at each log interval: each rank's time since
// the last report spent computing and spent waiting in communication (the flight recorder's),
// gathered, and one line naming the slowest and fastest rank and the spread of the waits.
#pragma once

#include <cstdint>

#include "core/timer.h"
#include "parallel/comm/communicator.h"

namespace trident {

class StragglerReport {
 public:
  // The next report covers the time from now.
  void restart();
  // Logs the line for iterations `from`-`to`. Collective over `world`.
  void report(Communicator& world, int64_t from, int64_t to);

 private:
  Stopwatch since_report_;
  double blocked_at_report_s_ = 0;  // the flight recorder's waiting time at the last report
};

}  // namespace trident
