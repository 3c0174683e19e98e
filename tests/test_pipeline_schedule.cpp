// Pipeline schedules as data (core/schedule/): every generator's schedule is complete and free
// of deadlock; on paper ZB-H1's bubble is 1F1B's less two thirds and ZB-V's smaller still at
// 1F1B's activation memory, DualPipe-V's as small at half a micro-batch more, in torch's order;
// bad schedules and files are one error naming the action; each
// rank's program sends what its peer receives, in the same order. And the split backward
// (parallel/split_backward.h): I leaves every weight's gradient to W, and the two add up to the
// whole backward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/schedule/pipeline_program.h"
#include "core/schedule/pipeline_simulation.h"
#include "core/schedule/schedule_file.h"
#include "model/dropout.h"
#include "model/expert_multiply.h"
#include "model/recompute.h"
#include "parallel/split_backward.h"
#include "tests/helpers.h"

using namespace trident;
using trident::testing::error_of;

namespace {

void expect_error(const std::function<void()>& body, const std::string& part) {
  const std::string message = error_of(body);
  EXPECT_NE(message.find(part), std::string::npos) << message;
}

Layout pipeline(Schedule schedule, int64_t p, int64_t m) {
  Layout layout;
  layout.pp_size = p;
  layout.schedule = schedule;
  layout.micro_batches = m;
  layout.virtual_stages = least_virtual_stages(schedule);
  return layout;
}

// Qi et al. 2024's unit costs, per virtual stage: a chunk of v does 1/v of a stage's work.
PipelineTimeline on_paper(const Layout& layout) {
  const double v = double(layout.virtual_stages);
  return simulate_pipeline(make_pipeline_schedule(layout), {1 / v, 1 / v, 1 / v});
}

PipelineSchedule two_ranks(const std::string& text, int64_t m = 1) {
  return parse_schedule_file(text, "s.csv", placed_schedule(pipeline(Schedule::zb_h1, 2, m)));
}

}  // namespace

TEST(PipelineSchedule, EveryGeneratorIsCompleteAndFreeOfDeadlock) {
  for (const std::string& spelling : spellings<Schedule>())
    for (int64_t p = 1; p <= 5; ++p)
      for (int64_t m = 1; m <= 12; ++m) {
        const Schedule schedule = spelled<Schedule>(spelling);
        if (!why_not_generated(schedule, p, m).empty()) continue;
        SCOPED_TRACE(str(name(schedule), " p=", p, " M=", m));
        const Layout layout = pipeline(schedule, p, m);
        EXPECT_NO_THROW(check_pipeline_schedule(make_pipeline_schedule(layout), "generated"));
        // 1F1B's memory: no rank holds more micro-batches than the pipeline's depth (GPipe all M);
        // DualPipe-V's busiest rank one chunk more, 2p + 1 chunks of half a stage.
        const PipelineTimeline timeline = on_paper(layout);
        const double most = *std::max_element(timeline.held_peak.begin(), timeline.held_peak.end());
        if (schedule == Schedule::dualpipe_v) EXPECT_DOUBLE_EQ(most, double(p) + 0.5);
        else if (schedule != Schedule::gpipe && schedule != Schedule::interleaved_1f1b)
          EXPECT_LE(most, double(std::min(p, m)));
      }
}

// With T_F = T_I = T_W = 1 per stage, 1F1B's iteration is 3M + 3(p - 1) and ZB-H1's 3M + (p - 1)
// (Qi et al. 2024: the bubble (p - 1)(T_F + T_B - T_W) against (p - 1)(T_F + T_B + T_W)); ZB-V's
// is shorter still with two chunks of half a stage each, and DualPipe-V's as short.
TEST(PipelineSchedule, ZeroBubbleSchedulesShrinkTheBubbleOnPaper) {
  for (int64_t p : {2, 4})
    for (int64_t m : {2 * p, 4 * p}) {
      SCOPED_TRACE(str("p=", p, " M=", m));
      const double one_f_one_b = on_paper(pipeline(Schedule::one_f_one_b, p, m)).makespan;
      const double zb_h1 = on_paper(pipeline(Schedule::zb_h1, p, m)).makespan;
      const double zb_v = on_paper(pipeline(Schedule::zb_v, p, m)).makespan;
      EXPECT_DOUBLE_EQ(one_f_one_b, double(3 * m + 3 * (p - 1)));
      EXPECT_DOUBLE_EQ(zb_h1, double(3 * m + (p - 1)));
      EXPECT_LT(zb_v, zb_h1);
      EXPECT_GE(zb_v, double(3 * m));
      // DualPipe-V, its backwards mostly whole, ends with ZB-V when its F and B run in turn.
      EXPECT_DOUBLE_EQ(on_paper(pipeline(Schedule::dualpipe_v, p, m)).makespan, zb_v);
    }
}

// Qi et al.'s ZB-H1 picture: the last rank runs each W after its I, rank r defers them r micro-batches.
TEST(PipelineSchedule, ZeroBubbleH1DefersEachRanksWeights) {
  const PipelineSchedule s = make_pipeline_schedule(pipeline(Schedule::zb_h1, 4, 6));
  EXPECT_EQ(schedule_file_text(s),
            "0F0,0F1,0F2,0F3,0I0,0W0,0F4,0I1,0W1,0F5,0I2,0W2,0I3,0W3,0I4,0W4,0I5,0W5\n"
            "1F0,1F1,1F2,1I0,1F3,1I1,1W0,1F4,1I2,1W1,1F5,1I3,1W2,1I4,1W3,1I5,1W4,1W5\n"
            "2F0,2F1,2I0,2F2,2I1,2F3,2I2,2W0,2F4,2I3,2W1,2F5,2I4,2W2,2I5,2W3,2W4,2W5\n"
            "3F0,3I0,3F1,3I1,3F2,3I2,3F3,3I3,3W0,3F4,3I4,3W1,3F5,3I5,3W2,3W3,3W4,3W5\n");
  // ZB-V's V: rank 0 holds the first and the last stage, rank p - 1 the two middle ones.
  const PipelineSchedule v = make_pipeline_schedule(pipeline(Schedule::zb_v, 3, 4));
  EXPECT_EQ(v.rank_of_stage, (std::vector<int64_t>{0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(v.chunk_of_stage, (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
}

// DualPipe-V at p = 2, M = 4 as torch.distributed.pipelining's ScheduleDualPipeV writes it (its
// overlapped pairs as F then B; tests/torch_schedules.py compares more against torch itself):
// rank 1 (the V's bottom) whole backwards from its first, each rank's last backwards split.
TEST(PipelineSchedule, DualPipeVRunsDeepSeeksOrder) {
  EXPECT_EQ(schedule_file_text(make_pipeline_schedule(pipeline(Schedule::dualpipe_v, 2, 4))),
            "0F0,0F1,0F2,3F0,3I0,3W0,3F1,0F3,3B1,3F2,0B0,3B2,3F3,0B1,3B3,0I2,0W2,0I3,0W3\n"
            "1F0,2F0,1F1,2F1,1F2,2B0,2F2,1B0,1F3,2B1,2F3,1B1,2B2,1B2,2I3,1I3,2W3,1W3\n");
}

TEST(PipelineSchedule, BadSchedulesAreOneErrorNamingTheAction) {
  expect_error([] { two_ranks("0F0,0B0\n1F0\n"); }, "s.csv: no backward of stage 1 and micro-batch 0 (rank 1)");
  expect_error([] { two_ranks("0F0,0B0\n1F0,1W0,1I0\n"); }, "s.csv: rank 1's action 2 (1W0) comes before its I (1I0)");
  expect_error([] { two_ranks("0F0,0B0,0F0\n1F0,1B0\n"); }, "rank 0's action 3 (0F0) repeats an action");
  expect_error([] { two_ranks("0F0,1B0\n1F0,1B0\n"); }, "rank 0's action 2 (1B0) runs stage 1, which rank 1 holds");
  expect_error([] { two_ranks("0F0,0B1\n1F0,1B0\n"); }, "rank 0's action 2 (0B1) names a micro-batch outside 0 to 0");
  expect_error([] { two_ranks("0F0,0B0\n1F0,1I0,1B0,1W0\n"); }, "1B0) mixes a whole backward (B) with a split one");
  expect_error([] { two_ranks("0F0,0B0\n"); }, "s.csv has 1 rows of actions, one per pipeline rank, but parallel.pipeline is 2");
  expect_error([] { two_ranks("# comment\n0F0,0B0\n1F0,1X0\n"); }, "s.csv line 3, cell 2: '1X0' is not an action");
  // Rank 0 waits for the gradient of micro-batch 1 before it sends micro-batch 1's activation.
  expect_error([] { two_ranks("0F0,0B1,0F1,0B0\n1F0,1B0,1F1,1B1\n", 2); },
               "s.csv deadlocks: rank 0 waits at its action 2 (0B1) for 0F1 and 1I1 or 1B1; "
               "rank 1 waits at its action 3 (1F1) for 0F1");
}

// A file reads back into the schedule it was written from (empty cells and comments skipped),
// and a hand-written one runs as written.
TEST(PipelineSchedule, FilesRoundTrip) {
  const Layout layout = pipeline(Schedule::zb_v, 2, 5);
  const PipelineSchedule generated = make_pipeline_schedule(layout);
  const PipelineSchedule read =
      parse_schedule_file("# zb-v\n" + schedule_file_text(generated), "s.csv", placed_schedule(layout));
  EXPECT_EQ(read.actions, generated.actions);
  EXPECT_EQ(two_ranks("0F0,,0I0,0W0\n 1F0 ,1I0,1W0\n").actions[1].size(), 3u);
}

// Every message a rank's program sends is received by its peer, in the same order per pair of
// ranks, and every received message before the action that uses it; the arm step comes once.
TEST(PipelineSchedule, ProgramsMatchTheirExchanges) {
  for (const std::string& spelling : spellings<Schedule>())
    for (int64_t p : {2, 3, 4}) {
      const Schedule schedule = spelled<Schedule>(spelling);
      SCOPED_TRACE(str(spelling, " p=", p));
      const Layout layout = pipeline(schedule, p, 2 * p);
      const PipelineSchedule s = make_pipeline_schedule(layout);
      using Message = std::tuple<int, int64_t, int64_t>;  // kind, stage, micro-batch
      std::map<std::pair<int64_t, int64_t>, std::vector<Message>> sent, received;  // by (from, to)
      for (int64_t r = 0; r < p; ++r) {
        int arms = 0;
        std::set<Message> arrived;
        for (const ProgramStep& step : rank_program(s, r)) {
          arms += step.type == ProgramStep::Type::arm;
          for (const PipelineMessage& m : step.messages) {
            const Message message{int(m.kind), m.stage, m.micro};
            if (m.send) sent[{r, m.peer}].push_back(message);
            else received[{m.peer, r}].push_back(message), arrived.insert(message);
          }
          if (step.type != ProgramStep::Type::compute) continue;
          const PipelineAction& a = step.action;
          const bool forward = a.kind == ActionKind::forward, backward = !forward && a.kind != ActionKind::weight_grad;
          if (forward && a.stage > 0 && s.rank_of_stage[size_t(a.stage - 1)] != r)
            EXPECT_TRUE(arrived.count({int(PipelineMessage::Kind::activation), a.stage, a.micro})) << to_string(a);
          if (backward && a.stage + 1 < s.stages() && s.rank_of_stage[size_t(a.stage + 1)] != r)
            EXPECT_TRUE(arrived.count({int(PipelineMessage::Kind::gradient), a.stage, a.micro})) << to_string(a);
        }
        EXPECT_EQ(arms, 1) << "rank " << r;
      }
      EXPECT_EQ(sent, received);
    }
}

// A toy stage: h = tanh(x W1^T + b1), y = h W2^T, with x a leaf like the pipeline's input.
TEST(SplitBackward, InputGradientFirstWeightsLaterAndTheyAddUpToTheWhole) {
  torch::manual_seed(0);
  auto w1 = torch::randn({5, 4}, torch::kDouble).requires_grad_(), b1 = torch::randn({5}, torch::kDouble).requires_grad_();
  auto w2 = torch::randn({3, 5}, torch::kDouble).requires_grad_();
  const auto x0 = torch::randn({2, 4}, torch::kDouble), dy = torch::randn({2, 3}, torch::kDouble);
  auto stage = [&](const torch::Tensor& x) { return torch::matmul(torch::tanh(torch::addmm(b1, x, w1.t())), w2.t()); };

  auto x = x0.clone().requires_grad_();
  torch::autograd::backward({stage(x)}, {dy});
  const auto whole_x = x.grad().clone(), whole_w1 = w1.grad().clone(), whole_b1 = b1.grad().clone(),
             whole_w2 = w2.grad().clone();
  for (auto* w : {&w1, &b1, &w2}) w->mutable_grad() = torch::Tensor();

  x = x0.clone().requires_grad_();
  WeightGrads weights;
  const auto dx = backward_inputs({stage(x)}, {dy}, {x}, weights);
  EXPECT_TRUE(torch::allclose(dx.at(0), whole_x));
  for (auto* w : {&w1, &b1, &w2}) EXPECT_FALSE(w->grad().defined()) << "I computed a weight's gradient";
  ASSERT_FALSE(weights.empty());
  weights.run();
  EXPECT_TRUE(torch::allclose(w1.grad(), whole_w1));
  EXPECT_TRUE(torch::allclose(b1.grad(), whole_b1));
  EXPECT_TRUE(torch::allclose(w2.grad(), whole_w2));
  EXPECT_TRUE(weights.empty());

  // A recomputed block splits too: its weights wait for the W.
  for (auto* w : {&w1, &b1, &w2}) w->mutable_grad() = torch::Tensor();
  DropoutStreams streams;
  const RecomputedFunction block = [&](const std::vector<torch::Tensor>& in) { return stage(in[0]); };
  x = x0.clone().requires_grad_();
  {
    SplitRecomputedBlocks split(weights);
    const auto got = backward_inputs({recompute(block, {x}, streams)}, {dy}, {x}, weights);
    EXPECT_TRUE(torch::allclose(got.at(0), whole_x));
  }
  for (auto* w : {&w1, &b1, &w2}) EXPECT_FALSE(w->grad().defined()) << "a recomputed block's I computed a weight's";
  weights.run();
  EXPECT_TRUE(torch::allclose(w1.grad(), whole_w1));
  EXPECT_TRUE(torch::allclose(w2.grad(), whole_w2));

  // A weight used at two depths of one stage cannot split: I runs the whole backward, W has nothing.
  auto square = torch::randn({4, 4}, torch::kDouble).requires_grad_();
  x = x0.clone().requires_grad_();
  const auto twice = torch::matmul(torch::matmul(x, square), square);
  const auto got = backward_inputs({twice}, {torch::ones_like(twice)}, {x}, weights);
  EXPECT_TRUE(square.grad().defined());
  EXPECT_TRUE(weights.empty());
  EXPECT_TRUE(got.at(0).defined());
}

// Experts multiplied one by one (model/expert_multiply.h without the grouped multiply) meet in
// their stacked weight: one W pass from every expert's multiply, after the input's gradient, gives
// the whole backward's gradients; an expert without rows too.
TEST(SplitBackward, ExpertsUnboundFromOneWeightSplitTogether) {
  torch::manual_seed(0);
  auto up = torch::randn({3, 6, 4}, torch::kDouble).requires_grad_();
  auto down = torch::randn({3, 4, 6}, torch::kDouble).requires_grad_();
  const std::vector<int64_t> counts = {2, 0, 3};
  const auto x0 = torch::randn({5, 4}, torch::kDouble), dy = torch::randn({5, 4}, torch::kDouble);
  auto experts = [&](const torch::Tensor& x) {
    return expert_multiply(torch::gelu(expert_multiply(x, up, counts, false)), down, counts, false);
  };
  auto x = x0.clone().requires_grad_();
  torch::autograd::backward({experts(x)}, {dy});
  const auto whole_x = x.grad().clone(), whole_up = up.grad().clone(), whole_down = down.grad().clone();
  up.mutable_grad() = down.mutable_grad() = torch::Tensor();

  x = x0.clone().requires_grad_();
  WeightGrads weights;
  const auto dx = backward_inputs({experts(x)}, {dy}, {x}, weights);
  EXPECT_TRUE(torch::allclose(dx.at(0), whole_x));
  EXPECT_FALSE(up.grad().defined() || down.grad().defined()) << "I computed the experts' gradients";
  ASSERT_FALSE(weights.empty());
  weights.run();
  EXPECT_TRUE(torch::allclose(up.grad(), whole_up));
  EXPECT_TRUE(torch::allclose(down.grad(), whole_down));
}
