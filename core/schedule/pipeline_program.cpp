#include "core/schedule/pipeline_program.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "core/schedule/pipeline_simulation.h"

namespace trident {
namespace {

bool makes_gradients(ActionKind kind) { return kind != ActionKind::forward; }

// The message an action ends with, if it crosses to another rank.
std::optional<std::pair<int64_t, PipelineMessage>> leaving(const PipelineSchedule& schedule,
                                                          const PipelineAction& a) {
  using Kind = PipelineMessage::Kind;
  const int64_t last = schedule.stages() - 1;
  int64_t to_stage = -1;
  Kind kind = Kind::activation;
  if (a.kind == ActionKind::forward && a.stage < last) to_stage = a.stage + 1, kind = Kind::activation;
  if ((a.kind == ActionKind::backward || a.kind == ActionKind::input_grad) && a.stage > 0)
    to_stage = a.stage - 1, kind = Kind::gradient;
  if (to_stage < 0) return std::nullopt;
  const int64_t from = schedule.rank_of_stage[size_t(a.stage)], to = schedule.rank_of_stage[size_t(to_stage)];
  if (from == to) return std::nullopt;  // handed over within the rank
  return std::pair<int64_t, PipelineMessage>{to, {kind, to_stage, a.micro, int(from), false}};
}

}  // namespace

std::vector<ProgramStep> rank_program(const PipelineSchedule& schedule, int64_t rank) {
  const PipelineTimeline timeline = simulate_pipeline(schedule);
  TRIDENT_CHECK(timeline.deadlock.empty(), "a schedule that deadlocks: ", timeline.deadlock);

  // This rank's messages by the time they cross, in one order on both ends.
  std::map<double, std::vector<PipelineMessage>> exchanges;
  for (int64_t r = 0; r < schedule.ranks(); ++r) {
    const auto& actions = schedule.actions[size_t(r)];
    for (size_t k = 0; k < actions.size(); ++k) {
      const auto message = leaving(schedule, actions[k]);
      if (!message) continue;
      const double at = timeline.times[size_t(r)][k].end;
      const auto& [to, received] = *message;
      if (to == rank) exchanges[at].push_back(received);
      if (r == rank) {
        PipelineMessage sent = received;
        sent.peer = int(to), sent.send = true;
        exchanges[at].push_back(sent);
      }
    }
  }
  for (auto& [at, messages] : exchanges)
    std::sort(messages.begin(), messages.end(), [](const PipelineMessage& a, const PipelineMessage& b) {
      return std::tie(a.kind, a.stage, a.micro, a.send) < std::tie(b.kind, b.stage, b.micro, b.send);
    });

  const auto& actions = schedule.actions[size_t(rank)];
  const int64_t last_micro = schedule.micro_batches - 1;
  size_t arm_at = 0;  // after the last gradient action of an earlier micro-batch
  for (size_t k = 0; k < actions.size(); ++k)
    if (makes_gradients(actions[k].kind) && actions[k].micro < last_micro) arm_at = k + 1;
  while (arm_at < actions.size() && !makes_gradients(actions[arm_at].kind)) ++arm_at;

  std::vector<ProgramStep> steps;
  auto post_until = [&](double time) {
    while (!exchanges.empty() && exchanges.begin()->first <= time) {
      steps.push_back({ProgramStep::Type::exchange, {}, std::move(exchanges.begin()->second)});
      exchanges.erase(exchanges.begin());
    }
  };
  for (size_t k = 0; k < actions.size(); ++k) {
    post_until(timeline.times[size_t(rank)][k].start);
    if (k == arm_at) steps.push_back({ProgramStep::Type::arm, {}, {}});
    steps.push_back({ProgramStep::Type::compute, actions[k], {}});
  }
  post_until(timeline.makespan);
  return steps;
}

}  // namespace trident
