#include "train/straggler_report.h"

#include "core/error.h"
#include "core/logging.h"
#include "core/text.h"
#include "parallel/comm/flight_recorder.h"

namespace trident {

void StragglerReport::restart() {
  since_report_.restart();
  blocked_at_report_s_ = FlightRecorder::process().blocked_seconds();
}

void StragglerReport::report(Communicator& world, int64_t from, int64_t to) {
  const double blocked = FlightRecorder::process().blocked_seconds();
  const double wall = since_report_.elapsed_s(), waiting = blocked - blocked_at_report_s_;
  since_report_.restart();
  blocked_at_report_s_ = blocked;
  const int n = world.size();
  auto all = torch::empty({n, 2}, torch::kDouble);
  world.all_gather(all, torch::tensor({wall - waiting, waiting}, torch::kDouble));
  auto compute = all.select(1, 0), wait = all.select(1, 1);
  const int64_t slowest = compute.argmax().item<int64_t>(), fastest = compute.argmin().item<int64_t>();
  const auto sorted = std::get<0>(wait.sort());
  log::info(str("ranks over iterations ", from, "-", to, ": computing slowest rank ", slowest, " ",
                fixed(compute[slowest].item<double>(), 2), " s, fastest rank ", fastest, " ",
                fixed(compute[fastest].item<double>(), 2), " s; waiting in communication min ",
                fixed(sorted[0].item<double>(), 2), " / median ", fixed(sorted[n / 2].item<double>(), 2), " / max ",
                fixed(sorted[n - 1].item<double>(), 2), " s"));
}

}  // namespace trident
