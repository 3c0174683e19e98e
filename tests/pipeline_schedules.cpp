// The pipeline runner (parallel/pipeline.h) over the whole job as one pipeline of 2, 3 or 4
// stages, with a toy model whose gradients have a closed form.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/schedule/pipeline_program.h"
#include "parallel/pipeline.h"
#include "tests/multiprocess.h"

using namespace trident;

namespace {

Communicator& group() { return trident::testing::world(); }
int64_t n() { return group().size(); }
int64_t me() { return group().rank(); }

PipelineOptions options(Schedule schedule, int64_t micro_batches, int64_t virtual_stages = 1) {
  Layout layout;
  layout.pp_size = n();
  layout.virtual_stages = virtual_stages;
  layout.schedule = schedule;
  layout.micro_batches = micro_batches;
  return pipeline_options(make_pipeline_schedule(layout), int(me()), {4}, torch::TensorOptions().dtype(torch::kDouble));
}

// The job's communicator, noting each exchange the runner posts: (peer, send) per transfer.
class NotingExchanges : public Communicator {
 public:
  using Exchange = std::vector<std::pair<int, bool>>;
  NotingExchanges(Communicator& inner, std::vector<Exchange>& log) : inner_(inner), log_(log) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend() const override { return inner_.backend(); }
  void all_reduce(torch::Tensor& t, ReduceOp op) override { inner_.all_reduce(t, op); }
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    inner_.reduce_scatter(out, in, op);
  }
  void all_gather(torch::Tensor& out, const torch::Tensor& in) override { inner_.all_gather(out, in); }
  void broadcast(torch::Tensor& t, int root) override { inner_.broadcast(t, root); }
  void send(const torch::Tensor& t, int peer) override { inner_.send(t, peer); }
  void recv(torch::Tensor& t, int peer) override { inner_.recv(t, peer); }
  void exchange(std::vector<Transfer>& transfers) override { exchange_async(transfers, "exchange")->wait(); }
  std::unique_ptr<PendingCollective> exchange_async(std::vector<Transfer> transfers, const char* operation) override {
    Exchange noted;
    for (const auto& t : transfers) noted.emplace_back(t.peer, t.send);
    log_.push_back(noted);
    return inner_.exchange_async(std::move(transfers), operation);
  }
  void barrier() override { inner_.barrier(); }
  std::shared_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }

 private:
  Communicator& inner_;
  std::vector<Exchange>& log_;
};

}  // namespace

// Every schedule runs on the real ranks as its program says (core/schedule/pipeline_program.h):
// the runner posts exactly the program's exchanges, in its order, which is what keeps two ranks'
// shared exchanges in one order; and with a toy model of a scalar weight 1/2 per virtual stage
// (input micro + 1, loss sum(output) / M), each weight's gradient is 4 sum(micro + 1) (1/2)^(S - 1) / M
// whatever the schedule, split (I and W) or whole.
TEST(PipelineSchedules, EveryScheduleRunsItsProgram) {
  const int64_t p = n();
  for (const std::string& spelling : spellings<Schedule>()) {
    const Schedule schedule = spelled<Schedule>(spelling);
    SCOPED_TRACE(spelling);
    const int64_t v = least_virtual_stages(schedule), m = 2 * p;
    const PipelineOptions o = options(schedule, m, v);
    std::vector<torch::Tensor> weights;
    for (int64_t c = 0; c < v; ++c) weights.push_back(torch::full({}, 0.5, torch::kDouble).requires_grad_());
    auto forward = [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
      auto x = input.defined() ? input : torch::full({4}, double(micro + 1), torch::kDouble);
      auto y = x * weights[size_t(chunk)];
      const bool last = o.schedule.rank_of_stage.back() == me() && o.schedule.chunk_of_stage.back() == chunk;
      return last ? y.sum() / double(m) : y;
    };
    std::vector<NotingExchanges::Exchange> posted;
    NotingExchanges noting(group(), posted);
    int armed = 0;
    run_pipeline(noting, o, forward, [&] { ++armed; });
    EXPECT_EQ(armed, 1);
    std::vector<NotingExchanges::Exchange> expected;
    for (const ProgramStep& step : o.program) {
      if (step.type != ProgramStep::Type::exchange) continue;
      expected.emplace_back();
      for (const PipelineMessage& message : step.messages) expected.back().emplace_back(message.peer, message.send);
    }
    EXPECT_EQ(posted, expected);

    double inputs = 0;
    for (int64_t micro = 0; micro < m; ++micro) inputs += double(micro + 1);
    const double expected_grad = 4 * inputs * std::pow(0.5, double(p * v - 1)) / double(m);
    for (int64_t c = 0; c < v; ++c) {
      ASSERT_TRUE(weights[size_t(c)].grad().defined()) << "chunk " << c;
      EXPECT_NEAR(weights[size_t(c)].grad().item<double>(), expected_grad, 1e-12 * expected_grad) << "chunk " << c;
    }
  }
}

// The scheduler's own counters: 1F1B keeps at most p micro-batches in flight (stage r holds
// p - r), GPipe all M; both run the same work.
TEST(PipelineSchedules, MicroBatchesInFlight) {
  const int64_t m = 6;
  auto weight = torch::full({4, 4}, 0.5, torch::kDouble).requires_grad_();
  auto forward = [&](int64_t, int64_t micro, const torch::Tensor& input) {
    auto x = input.defined() ? input : torch::full({4}, double(micro + 1), torch::kDouble);
    auto y = torch::matmul(weight, x);
    return me() == n() - 1 ? y.sum() / double(m) : y;
  };
  torch::Tensor one_f_one_b_grad;
  for (Schedule schedule : {Schedule::one_f_one_b, Schedule::gpipe}) {
    SCOPED_TRACE(name(schedule));
    weight.mutable_grad() = torch::Tensor();
    int armed = 0;
    const PipelineStats stats = run_pipeline(group(), options(schedule, m), forward, [&] { ++armed; });
    EXPECT_EQ(armed, 1);
    if (schedule == Schedule::one_f_one_b) {
      EXPECT_EQ(stats.max_in_flight, std::min<int64_t>(n() - me(), m));
      EXPECT_LE(stats.max_in_flight, n());
    } else {
      EXPECT_EQ(stats.max_in_flight, m);
    }
    ASSERT_TRUE(weight.grad().defined());
    // Both schedules accumulate the gradient of all M micro-batches.
    if (schedule == Schedule::one_f_one_b) one_f_one_b_grad = weight.grad().clone();
    else EXPECT_TRUE(torch::allclose(weight.grad(), one_f_one_b_grad));
  }
}

// Interleaved 1F1B with v = 2 chunks per stage, M = p (all warm-up) and M = 2p: forward k runs
// chunk (k / p) mod v of micro-batch (k / pv) p + k mod p, backward the mirrored chunk in the
// same order (Megatron's), each (chunk, micro-batch) once; at most warm-up + 1 micro-batches are
// in flight, warm-up = 2 (p - rank - 1) + (v - 1) p; and every micro-batch passes all p v
// virtual stages: with a scalar weight 1/2 per virtual stage, input micro + 1 and loss
// sum(output) / M, each weight's gradient is 4 sum(micro + 1) (1/2)^(pv - 1) / M.
TEST(PipelineSchedules, InterleavedRunsEveryChunkInMegatronsOrder) {
  const int64_t p = n(), v = 2;
  for (int64_t m : {p, 2 * p}) {
    SCOPED_TRACE("M = " + std::to_string(m));
    std::vector<torch::Tensor> weights;
    for (int64_t c = 0; c < v; ++c) weights.push_back(torch::full({}, 0.5, torch::kDouble).requires_grad_());
    std::vector<std::pair<int64_t, int64_t>> forwards, backwards;  // (chunk, micro)
    auto forward = [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
      forwards.emplace_back(chunk, micro);
      auto x = input.defined() ? input : torch::full({4}, double(micro + 1), torch::kDouble);
      auto y = x * weights[size_t(chunk)];
      y.register_hook([&backwards, chunk, micro](torch::Tensor grad) {
        backwards.emplace_back(chunk, micro);
        return grad;
      });
      return me() == p - 1 && chunk == v - 1 ? y.sum() / double(m) : y;
    };
    int armed = 0;
    const PipelineStats stats =
        run_pipeline(group(), options(Schedule::interleaved_1f1b, m, v), forward, [&] { ++armed; });
    EXPECT_EQ(armed, 1);

    const int64_t total = m * v;
    std::vector<std::pair<int64_t, int64_t>> expected_forwards, expected_backwards;
    for (int64_t k = 0; k < total; ++k) {
      const int64_t chunk = k / p % v, micro = k / (p * v) * p + k % p;
      expected_forwards.emplace_back(chunk, micro);
      expected_backwards.emplace_back(v - 1 - chunk, micro);
    }
    EXPECT_EQ(forwards, expected_forwards);
    EXPECT_EQ(backwards, expected_backwards);
    const int64_t warmup = m == p ? total : std::min(total, 2 * (p - me() - 1) + (v - 1) * p);
    EXPECT_EQ(stats.max_in_flight, std::min(total, warmup + 1));

    double inputs = 0;
    for (int64_t micro = 0; micro < m; ++micro) inputs += double(micro + 1);
    const double expected = 4 * inputs * std::pow(0.5, double(p * v - 1)) / double(m);
    for (int64_t c = 0; c < v; ++c) {
      ASSERT_TRUE(weights[size_t(c)].grad().defined()) << "chunk " << c;
      EXPECT_NEAR(weights[size_t(c)].grad().item<double>(), expected, 1e-12 * expected) << "chunk " << c;
    }
  }
}
