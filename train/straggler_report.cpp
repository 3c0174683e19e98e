#include "train/straggler_report.h"

#include "core/error.h"
#include "core/text.h"
#include "parallel/comm/flight_recorder.h"

namespace trident {

void StragglerReport::restart() {
  since_report_.restart();
  blocked_at_report_s_ = FlightRecorder::process().blocked_seconds();
}

StragglerFigures StragglerReport::measure(Communicator& world) {
  const double blocked = FlightRecorder::process().blocked_seconds();
  const double wall = since_report_.elapsed_s(), waiting = blocked - blocked_at_report_s_;
  since_report_.restart();
  blocked_at_report_s_ = blocked;
  const int n = world.size();
  auto all = torch::empty({n, 2}, torch::kDouble);
  world.all_gather(all, torch::tensor({wall - waiting, waiting}, torch::kDouble));
  auto compute = all.select(1, 0), wait = all.select(1, 1);
  StragglerFigures f;
  f.slowest_rank = compute.argmax().item<int64_t>();
  f.fastest_rank = compute.argmin().item<int64_t>();
  f.slowest_compute_s = compute[f.slowest_rank].item<double>();
  f.fastest_compute_s = compute[f.fastest_rank].item<double>();
  const auto sorted = std::get<0>(wait.sort());
  f.wait_min_s = sorted[0].item<double>();
  f.wait_median_s = sorted[n / 2].item<double>();
  f.wait_max_s = sorted[n - 1].item<double>();
  return f;
}

std::string straggler_line(const StragglerFigures& f, int64_t from, int64_t to) {
  return str("ranks over iterations ", from, "-", to, ": computing slowest rank ", f.slowest_rank, " ",
             fixed(f.slowest_compute_s, 2), " s, fastest rank ", f.fastest_rank, " ", fixed(f.fastest_compute_s, 2),
             " s; waiting in communication min ", fixed(f.wait_min_s, 2), " / median ", fixed(f.wait_median_s, 2),
             " / max ", fixed(f.wait_max_s, 2), " s");
}

}  // namespace trident
