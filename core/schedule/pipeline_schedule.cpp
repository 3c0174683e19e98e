#include "core/schedule/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>

#include "core/error.h"
#include "core/schedule/pipeline_simulation.h"

namespace trident {
namespace {

using Actions = std::vector<PipelineAction>;

PipelineAction action(ActionKind kind, int64_t stage, int64_t micro) { return {kind, stage, micro}; }

// GPipe: every forward, then every backward, in micro-batch order.
Actions gpipe(int64_t rank, int64_t m) {
  Actions out;
  for (int64_t i = 0; i < m; ++i) out.push_back(action(ActionKind::forward, rank, i));
  for (int64_t i = 0; i < m; ++i) out.push_back(action(ActionKind::backward, rank, i));
  return out;
}

// 1F1B: rank r of p runs p - r - 1 forwards before its first backward, then one forward and one
// backward in turn, then the backwards left. Split (ZB-H1), each backward is an I, and rank r
// runs the W of its oldest micro-batch after every I but its first r: rank 0's W follow their I
// at once, rank r's lag r micro-batches, filling the idle time before its drain's backwards.
//
//   p = 4, M = 6, zb-h1, rank 1:   F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 I4 W3 I5 W4 W5
Actions one_f_one_b(int64_t rank, int64_t p, int64_t m, bool split) {
  Actions out;
  int64_t weights = 0;
  auto backward = [&](int64_t micro) {
    if (!split) return out.push_back(action(ActionKind::backward, rank, micro));
    out.push_back(action(ActionKind::input_grad, rank, micro));
    if (micro >= rank) out.push_back(action(ActionKind::weight_grad, rank, weights++));
  };
  const int64_t warmup = std::min(p - rank - 1, m);
  for (int64_t i = 0; i < warmup; ++i) out.push_back(action(ActionKind::forward, rank, i));
  for (int64_t i = 0; i < m - warmup; ++i) {
    out.push_back(action(ActionKind::forward, rank, warmup + i));
    backward(i);
  }
  for (int64_t i = m - warmup; i < m; ++i) backward(i);
  while (split && weights < m) out.push_back(action(ActionKind::weight_grad, rank, weights++));
  return out;
}

// Interleaved 1F1B in Megatron's order (Narayanan et al. 2021, section 2.2): virtual micro-batch
// k runs chunk (k / p) mod v forward and the mirrored chunk backward, on micro-batch
// (k / pv) p + k mod p; 2 (p - r - 1) + (v - 1) p forwards come first (all of them when M = p).
Actions interleaved(int64_t rank, int64_t p, int64_t v, int64_t m, const Layout& layout) {
  auto chunk_of = [&](int64_t k) { return k / p % v; };
  auto micro_of = [&](int64_t k) { return k / (p * v) * p + k % p; };
  auto forward = [&](int64_t k) {
    return action(ActionKind::forward, layout.virtual_stage(chunk_of(k), rank), micro_of(k));
  };
  auto backward = [&](int64_t k) {
    return action(ActionKind::backward, layout.virtual_stage(v - 1 - chunk_of(k), rank), micro_of(k));
  };
  const int64_t total = m * v;
  const int64_t warmup = m == p ? total : std::min(total, 2 * (p - rank - 1) + (v - 1) * p);
  Actions out;
  for (int64_t k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(forward(warmup + k));
    out.push_back(backward(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(backward(k));
  return out;
}

// ZB-V: rank r holds stage r (chunk 0, on the way down) and stage 2p - 1 - r (chunk 1, on the
// way back), so the last rank passes its own activations from one chunk to the other and the
// first computes both the embedding and the loss. Written for n = max(M, 2p - 1) micro-batches,
// enough to fill the V, then cut to M (dropping whole micro-batches keeps the order valid):
//   warm-up   2 (p - r) - 1 forwards of chunk 0; r times F1 F0; p - r times F1 I1 W1
//   steady    F0 (while any are left) I0 W0 F1 I1 W1, until chunk 1 has caught up
//   drain     r times I0 I1; p - r times I0 W0 (the oldest W); then every W left, chunk 1's first
Actions zb_v(int64_t rank, int64_t p, int64_t m) {
  const int64_t down = rank, up = 2 * p - 1 - rank, n = std::max(m, 2 * p - 1);
  struct Counts {
    int64_t forward = 0, input = 0, weight = 0;
  } c0, c1;
  Actions out;
  auto f = [&](int64_t stage, Counts& c) { out.push_back(action(ActionKind::forward, stage, c.forward++)); };
  auto i = [&](int64_t stage, Counts& c) { out.push_back(action(ActionKind::input_grad, stage, c.input++)); };
  auto w = [&](int64_t stage, Counts& c) { out.push_back(action(ActionKind::weight_grad, stage, c.weight++)); };
  for (int64_t k = 0; k < 2 * (p - rank) - 1; ++k) f(down, c0);
  for (int64_t k = 0; k < rank; ++k) f(up, c1), f(down, c0);
  for (int64_t k = 0; k < p - rank; ++k) f(up, c1), i(up, c1), w(up, c1);
  while (c1.forward < c0.forward || c0.forward < n) {
    if (c0.forward < n) f(down, c0);
    i(down, c0), w(down, c0), f(up, c1), i(up, c1), w(up, c1);
  }
  for (int64_t k = 0; k < rank; ++k) i(down, c0), i(up, c1);
  for (int64_t k = 0; k < p - rank; ++k) i(down, c0), w(down, c0);
  while (c1.weight < c1.input) w(up, c1);
  while (c0.weight < c0.input) w(down, c0);
  TRIDENT_CHECK(c0.forward == n && c0.weight == n && c1.forward == n && c1.weight == n,
                "ZB-V left micro-batches unfinished on rank ", rank);
  out.erase(std::remove_if(out.begin(), out.end(), [&](const PipelineAction& a) { return a.micro >= m; }), out.end());
  return out;
}

// DualPipe-V (DeepSeek's DualPipe cut in half, in the order of DeepSeek's DualPipe repository and
// torch.distributed.pipelining's ScheduleDualPipeV): ZB-V's V, most backwards whole, for M >= 2p
// micro-batches (Layout checks it):
//   warm-up   2 (p - r - 1) times F0; r + 1 times F0 F1; p - r - 1 times I1 W F1
//   steady    M - 2p + r + 1 times F0 B1 F1 B0
//   drain     p - r - 1 times B1 F1 B0; r + 1 times B1 B0, their second half split into I (an odd
//             rank from a B1 on, an even one from a B0); p - r - 1 times W I0; r + 1 times W
// where each W is the oldest I's. On GPUs DualPipe overlaps each F with the B beside it, which
// hides expert parallelism's all-to-all behind the other's compute; this runner runs them in turn.
Actions dualpipe_v(int64_t rank, int64_t p, int64_t m) {
  TRIDENT_CHECK(m >= 2 * p, "DualPipe-V needs at least 2p micro-batches (", 2 * p, "), got ", m);
  const int64_t stage[2] = {rank, 2 * p - 1 - rank};
  int64_t forwards[2] = {0, 0}, backwards[2] = {0, 0};
  std::deque<PipelineAction> waiting;  // the W of each I, oldest first
  Actions out;
  auto f = [&](int chunk) { out.push_back(action(ActionKind::forward, stage[chunk], forwards[chunk]++)); };
  auto b = [&](int chunk, bool split) {
    const int64_t micro = backwards[chunk]++;
    out.push_back(action(split ? ActionKind::input_grad : ActionKind::backward, stage[chunk], micro));
    if (split) waiting.push_back(action(ActionKind::weight_grad, stage[chunk], micro));
  };
  auto w = [&] {
    TRIDENT_CHECK(!waiting.empty(), "DualPipe-V runs a W with no I waiting on rank ", rank);
    out.push_back(waiting.front());
    waiting.pop_front();
  };
  for (int64_t k = 0; k < 2 * (p - rank - 1); ++k) f(0);
  for (int64_t k = 0; k < rank + 1; ++k) f(0), f(1);
  for (int64_t k = 0; k < p - rank - 1; ++k) b(1, true), w(), f(1);
  for (int64_t k = 0; k < m - 2 * p + rank + 1; ++k) f(0), b(1, false), f(1), b(0, false);
  for (int64_t k = 0; k < p - rank - 1; ++k) b(1, false), f(1), b(0, false);
  bool split = false;
  for (int64_t k = 0; k < rank + 1; ++k) {
    split |= k == (rank + 1) / 2 && rank % 2 == 1;
    b(1, split);
    split |= k == (rank + 1) / 2 && rank % 2 == 0;
    b(0, split);
  }
  for (int64_t k = 0; k < p - rank - 1; ++k) w(), b(0, true);
  for (int64_t k = 0; k < rank + 1; ++k) w();
  TRIDENT_CHECK(waiting.empty() && forwards[0] == m && forwards[1] == m && backwards[0] == m && backwards[1] == m,
                "DualPipe-V left micro-batches unfinished on rank ", rank);
  return out;
}

}  // namespace

char letter(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward: return 'F';
    case ActionKind::backward: return 'B';
    case ActionKind::input_grad: return 'I';
    case ActionKind::weight_grad: return 'W';
  }
  return '?';
}

std::string to_string(const PipelineAction& a) { return str(a.stage, letter(a.kind), a.micro); }

PipelineSchedule placed_schedule(const Layout& layout) {
  PipelineSchedule out;
  out.micro_batches = layout.micro_batches;
  const int64_t stages = layout.pp_size * layout.virtual_stages;
  out.rank_of_stage.assign(size_t(stages), -1);
  out.chunk_of_stage.assign(size_t(stages), -1);
  for (int64_t r = 0; r < layout.pp_size; ++r)
    for (int64_t c = 0; c < layout.virtual_stages; ++c) {
      const int64_t stage = layout.virtual_stage(c, r);
      out.rank_of_stage[size_t(stage)] = r;
      out.chunk_of_stage[size_t(stage)] = c;
    }
  out.actions.resize(size_t(layout.pp_size));
  return out;
}

PipelineSchedule make_pipeline_schedule(const Layout& layout) {
  PipelineSchedule out = placed_schedule(layout);
  const int64_t p = layout.pp_size, v = layout.virtual_stages, m = layout.micro_batches;
  for (int64_t r = 0; r < p; ++r) {
    Actions& actions = out.actions[size_t(r)];
    switch (layout.schedule) {
      case Schedule::gpipe: actions = gpipe(r, m); break;
      case Schedule::one_f_one_b: actions = one_f_one_b(r, p, m, false); break;
      case Schedule::zb_h1: actions = one_f_one_b(r, p, m, true); break;
      case Schedule::interleaved_1f1b: actions = interleaved(r, p, v, m, layout); break;
      case Schedule::zb_v: actions = zb_v(r, p, m); break;
      case Schedule::dualpipe_v: actions = dualpipe_v(r, p, m); break;
    }
  }
  return out;
}

std::string why_not_generated(Schedule schedule, int64_t p, int64_t m) {
  if (least_virtual_stages(schedule) > 1 && p < 2) return "two chunks per rank need 2 ranks or more";
  if (schedule == Schedule::interleaved_1f1b && m % p != 0) return "M is not a multiple of the ranks";
  if (schedule == Schedule::dualpipe_v && m < 2 * p) return "M is below 2 x ranks";
  return "";
}

void check_pipeline_schedule(const PipelineSchedule& schedule, const std::string& origin) {
  const int64_t stages = schedule.stages(), m = schedule.micro_batches;
  auto fail = [&](int64_t rank, size_t index, const PipelineAction& a, const std::string& why) {
    throw Error(str(origin, ": rank ", rank, "'s action ", index + 1, " (", to_string(a), ") ", why));
  };
  // Per stage and micro-batch, how often each kind occurs.
  std::vector<std::array<int64_t, 4>> seen(size_t(stages * m), std::array<int64_t, 4>{});
  for (int64_t r = 0; r < schedule.ranks(); ++r) {
    const auto& actions = schedule.actions[size_t(r)];
    for (size_t k = 0; k < actions.size(); ++k) {
      const PipelineAction& a = actions[k];
      if (a.stage < 0 || a.stage >= stages) fail(r, k, a, str("names a stage outside 0 to ", stages - 1));
      if (a.micro < 0 || a.micro >= m) fail(r, k, a, str("names a micro-batch outside 0 to ", m - 1));
      if (schedule.rank_of_stage[size_t(a.stage)] != r)
        fail(r, k, a, str("runs stage ", a.stage, ", which rank ", schedule.rank_of_stage[size_t(a.stage)], " holds"));
      auto& count = seen[size_t(a.stage * m + a.micro)];
      if (++count[size_t(a.kind)] > 1) fail(r, k, a, "repeats an action");
      if (a.kind == ActionKind::weight_grad && count[size_t(ActionKind::input_grad)] == 0)
        fail(r, k, a, str("comes before its I (", a.stage, "I", a.micro, ")"));
      const bool whole = count[size_t(ActionKind::backward)] > 0;
      const bool split = count[size_t(ActionKind::input_grad)] + count[size_t(ActionKind::weight_grad)] > 0;
      if (whole && split) fail(r, k, a, "mixes a whole backward (B) with a split one (I and W)");
    }
  }
  for (int64_t s = 0; s < stages; ++s)
    for (int64_t i = 0; i < m; ++i) {
      const auto& count = seen[size_t(s * m + i)];
      const std::string which = str(" of stage ", s, " and micro-batch ", i, " (rank ", schedule.rank_of_stage[size_t(s)], ")");
      if (count[size_t(ActionKind::forward)] == 0) throw Error(str(origin, ": no forward", which));
      const bool split = count[size_t(ActionKind::input_grad)] > 0;
      if (count[size_t(ActionKind::backward)] == 0 && !split) throw Error(str(origin, ": no backward", which));
      if (split && count[size_t(ActionKind::weight_grad)] == 0)
        throw Error(str(origin, ": no W", which, " after its I"));
    }
  const PipelineTimeline timeline = simulate_pipeline(schedule);
  if (!timeline.deadlock.empty()) throw Error(str(origin, " deadlocks: ", timeline.deadlock));
}

}  // namespace trident
