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
  Done(int64_t stages, int64_t m) : m_(m), ends_(size_t(4 * stages * m)) {}
  std::optional<double>& at(ActionKind kind, int64_t stage, int64_t micro) {
    return ends_[size_t((int64_t(kind) * (int64_t(ends_.size()) / 4 / m_) + stage) * m_ + micro)];
  }
  // The backward of (stage, micro) that the previous stage waits for: its I or its B.
  std::optional<double> backward(int64_t stage, int64_t micro) {
    auto& whole = at(ActionKind::backward, stage, micro);
    return whole ? whole : at(ActionKind::input_grad, stage, micro);
  }

 private:
  int64_t m_;
  std::vector<std::optional<double>> ends_;
};

struct Need {
  std::optional<double> end;  // when what is needed ended, if it has
  std::string what;           // what is needed ("2I3")
};

// What `a` waits for, besides its rank being free.
std::vector<Need> needs(const PipelineAction& a, int64_t stages, Done& done) {
  auto name = [](int64_t stage, const char* kind, int64_t micro) { return str(stage, kind, micro); };
  std::vector<Need> out;
  switch (a.kind) {
    case ActionKind::forward:
      if (a.stage > 0) out.push_back({done.at(ActionKind::forward, a.stage - 1, a.micro), name(a.stage - 1, "F", a.micro)});
      break;
    case ActionKind::backward:
    case ActionKind::input_grad:
      out.push_back({done.at(ActionKind::forward, a.stage, a.micro), name(a.stage, "F", a.micro)});
      if (a.stage + 1 < stages)
        out.push_back({done.backward(a.stage + 1, a.micro),
                       name(a.stage + 1, "I", a.micro) + " or " + name(a.stage + 1, "B", a.micro)});
      break;
    case ActionKind::weight_grad:
      out.push_back({done.at(ActionKind::input_grad, a.stage, a.micro), name(a.stage, "I", a.micro)});
      break;
  }
  return out;
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
        for (const Need& need : needs(a, stages, done)) {
          if (!need.end) ready = false;
          else start = std::max(start, *need.end);
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
    for (const Need& need : needs(actions[k], stages, done))
      if (!need.end) waits += (waits.empty() ? "" : " and ") + need.what;
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
