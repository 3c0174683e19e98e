#include "core/schedule/pipeline_simulation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <optional>

#include "core/error.h"

namespace trident {
namespace {

// When each (kind, stage, micro-batch) ended, once it has.
class Done {
 public:
  Done(int64_t stages, int64_t m) : stages_(stages), m_(m), ends_(size_t(4 * stages * m)) {}
  std::optional<double>& at(ActionKind kind, int64_t stage, int64_t micro) {
    return ends_[size_t((int64_t(kind) * stages_ + stage) * m_ + micro)];
  }
  // When `a` ended; for an I, the B that stands for it too (what the previous stage waits for).
  std::optional<double> of(const PipelineAction& a) {
    const auto& ended = at(a.kind, a.stage, a.micro);
    return ended || a.kind != ActionKind::input_grad ? ended : at(ActionKind::backward, a.stage, a.micro);
  }

 private:
  int64_t stages_, m_;
  std::vector<std::optional<double>> ends_;
};

// What `a` waits for, besides its rank being free: at most two actions (an I standing for "its
// I or its B").
struct Needs {
  PipelineAction actions[2];
  int count = 0;
};

Needs needs(const PipelineAction& a, int64_t stages) {
  Needs out;
  auto need = [&](ActionKind kind, int64_t stage) { out.actions[out.count++] = {kind, stage, a.micro}; };
  switch (a.kind) {
    case ActionKind::forward:
      if (a.stage > 0) need(ActionKind::forward, a.stage - 1);
      break;
    case ActionKind::backward:
    case ActionKind::input_grad:
      need(ActionKind::forward, a.stage);
      if (a.stage + 1 < stages) need(ActionKind::input_grad, a.stage + 1);
      break;
    case ActionKind::weight_grad:
      need(ActionKind::input_grad, a.stage);
      break;
  }
  return out;
}

// "2I3", or "2I3 or 2B3" where a B would do as well.
std::string name_needed(const PipelineAction& needed, const PipelineAction& waiting) {
  const bool either = needed.kind == ActionKind::input_grad && waiting.kind != ActionKind::weight_grad;
  return to_string(needed) + (either ? str(" or ", needed.stage, "B", needed.micro) : "");
}

}  // namespace

double ActionCosts::of(ActionKind kind) const {
  switch (kind) {
    case ActionKind::forward: return forward;
    case ActionKind::backward: return input_grad + weight_grad;
    case ActionKind::input_grad: return input_grad;
    case ActionKind::weight_grad: return weight_grad;
  }
  return 0;
}

PipelineTimeline simulate_pipeline(const PipelineSchedule& schedule, const ActionCosts& costs) {
  const int64_t p = schedule.ranks(), stages = schedule.stages();
  PipelineTimeline out;
  out.times.resize(size_t(p));
  out.busy.assign(size_t(p), 0);
  Done done(stages, schedule.micro_batches);
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free_at(size_t(p), 0);
  // Sweep the ranks, each running what it can, until none can: the times do not depend on the
  // sweep's order (each is the longest path to its action).
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      const auto& actions = schedule.actions[size_t(r)];
      for (size_t& k = next[size_t(r)]; k < actions.size(); ++k) {
        const PipelineAction& a = actions[k];
        double start = free_at[size_t(r)];
        bool ready = true;
        const Needs needed = needs(a, stages);
        for (int i = 0; i < needed.count; ++i) {
          const std::optional<double> end = done.of(needed.actions[i]);
          if (!end) ready = false;
          else start = std::max(start, *end);
        }
        if (!ready) break;
        const double end = start + costs.of(a.kind);
        out.times[size_t(r)].push_back({start, end});
        done.at(a.kind, a.stage, a.micro) = end;
        free_at[size_t(r)] = end;
        out.busy[size_t(r)] += end - start;
        out.makespan = std::max(out.makespan, end);
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < p; ++r) {
    const auto& actions = schedule.actions[size_t(r)];
    const size_t k = next[size_t(r)];
    if (k == actions.size()) continue;
    std::string waits;
    const Needs needed = needs(actions[k], stages);
    for (int i = 0; i < needed.count; ++i)
      if (!done.of(needed.actions[i]))
        waits += (waits.empty() ? "" : " and ") + name_needed(needed.actions[i], actions[k]);
    out.deadlock += str(out.deadlock.empty() ? "" : "; ", "rank ", r, " waits at its action ", k + 1, " (",
                        to_string(actions[k]), ") for ", waits);
  }
  if (!out.deadlock.empty()) return out;

  // Activations held: +1 chunk at an F's start, -1 at the end of its B or W.
  const double chunks = double(stages) / double(p);
  out.held_peak.assign(size_t(p), 0);
  for (int64_t r = 0; r < p; ++r) {
    std::vector<std::pair<double, int>> events;  // releases sort before takes at equal times
    const auto& actions = schedule.actions[size_t(r)];
    for (size_t k = 0; k < actions.size(); ++k) {
      const ActionKind kind = actions[k].kind;
      if (kind == ActionKind::forward) events.push_back({out.times[size_t(r)][k].start, +1});
      if (kind == ActionKind::backward || kind == ActionKind::weight_grad)
        events.push_back({out.times[size_t(r)][k].end, -1});
    }
    std::sort(events.begin(), events.end());
    int held = 0, most = 0;
    for (const auto& event : events) most = std::max(most, held += event.second);
    out.held_peak[size_t(r)] = double(most) / chunks;
  }
  return out;
}

ScheduleShape schedule_shape(const Layout& layout, const ActionCosts& stage_costs) {
  using Key = std::tuple<Schedule, int64_t, int64_t, int64_t, double, double, double>;
  static std::mutex mutex;
  static std::map<Key, ScheduleShape> known;
  const Key key{layout.schedule,          layout.pp_size,          layout.virtual_stages, layout.micro_batches,
                stage_costs.forward, stage_costs.input_grad, stage_costs.weight_grad};
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = known.find(key); found != known.end()) return found->second;
  const double v = double(layout.virtual_stages);
  const ActionCosts chunk{stage_costs.forward / v, stage_costs.input_grad / v, stage_costs.weight_grad / v};
  const PipelineTimeline timeline = simulate_pipeline(make_pipeline_schedule(layout), chunk);
  TRIDENT_CHECK(timeline.deadlock.empty(), "parallel.schedule=", layout.schedule, " deadlocks: ", timeline.deadlock);
  const double stage_time = stage_costs.forward + stage_costs.input_grad + stage_costs.weight_grad;
  ScheduleShape shape;
  shape.bubble_stage_times = std::max(0.0, (timeline.makespan - double(layout.micro_batches) * stage_time) / stage_time);
  shape.held_micro_batches = *std::max_element(timeline.held_peak.begin(), timeline.held_peak.end());
  return known[key] = shape;
}

std::string render_timeline(const PipelineSchedule& schedule, const PipelineTimeline& timeline) {
  TRIDENT_CHECK(timeline.deadlock.empty(), "no timeline for a schedule that deadlocks");
  const int64_t width = int64_t(std::ceil(timeline.makespan));
  std::string out;
  for (int64_t r = 0; r < schedule.ranks(); ++r) {
    std::string line(size_t(2 * width), '.');
    const auto& actions = schedule.actions[size_t(r)];
    for (size_t k = 0; k < actions.size(); ++k) {
      const PipelineAction& a = actions[k];
      const ActionTime& t = timeline.times[size_t(r)][k];
      char l = letter(a.kind);
      if (schedule.chunk_of_stage[size_t(a.stage)] % 2 == 1) l = char(std::tolower(l));
      const std::string label = str(l, a.micro % 10);
      for (int64_t u = int64_t(t.start); u < int64_t(std::ceil(t.end)); ++u) line.replace(size_t(2 * u), 2, label);
    }
    out += str("rank ", r, "  ", line, "\n");
  }
  return out;
}

}  // namespace trident
