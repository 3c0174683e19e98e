// The straggler report of a job of several ranks, at each log interval: each rank's time since
// the last report spent computing and spent waiting in communication (the flight recorder's),
// gathered, and one line naming the slowest and fastest rank and the spread of the waits; the
// same figures go into the metrics file and TensorBoard (IterationMetrics::stragglers). A
// validation or save at a report belongs to no interval.
#pragma once

#include <cstdint>
#include <string>

#include "core/timer.h"
#include "parallel/comm/communicator.h"

namespace trident {

struct StragglerFigures {
  int64_t slowest_rank = 0, fastest_rank = 0;
  double slowest_compute_s = 0, fastest_compute_s = 0;  // time computing, of those ranks
  double wait_min_s = 0, wait_median_s = 0, wait_max_s = 0;  // time waiting in communication
};

class StragglerReport {
 public:
  // The next report covers the time from now.
  void restart();
  // Every rank's figures since the last report (or restart). Collective over `world`.
  StragglerFigures measure(Communicator& world);

 private:
  Stopwatch since_report_;
  double blocked_at_report_s_ = 0;  // the flight recorder's waiting time at the last report
};

// The report's line for iterations `from`-`to`.
std::string straggler_line(const StragglerFigures& f, int64_t from, int64_t to);

}  // namespace trident
