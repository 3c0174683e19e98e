// The pipeline schedules (parallel/pipeline.h) over the whole job as one pipeline of 2, 3 or 4
// stages, with a toy model whose gradients have a closed form.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

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
  PipelineOptions o;
  o.schedule = make_pipeline_schedule(layout);
  o.activation_shape = {4};
  o.activation_options = torch::TensorOptions().dtype(torch::kDouble);
  return o;
}

// The job's communicator, noting when a receive from the previous stage is posted.
class NotingReceives : public Communicator {
 public:
  NotingReceives(Communicator& inner, std::vector<std::string>& log) : inner_(inner), log_(log) {}
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
    for (const auto& t : transfers)
      if (!t.send && t.peer == rank() - 1) log_.push_back("receive");
    return inner_.exchange_async(std::move(transfers), operation);
  }
  void barrier() override { inner_.barrier(); }
  std::shared_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }

 private:
  Communicator& inner_;
  std::vector<std::string>& log_;
};

}  // namespace

// 1F1B asks for the next micro-batch's input before the backward that precedes its forward,
// so that it travels while the stage computes: on every stage but the first, with w = p - r - 1
// warm-up forwards, the receive of input w + i + 1 is posted before backward i starts, for
// every steady step i but the last.
TEST(PipelineSchedules, OneFOneBPostsTheNextReceiveBeforeTheBackward) {
  const int64_t m = 6;
  std::vector<std::string> log;
  NotingReceives noting(group(), log);
  auto weight = torch::full({4, 4}, 0.5, torch::kDouble).requires_grad_();
  auto forward = [&](int64_t, int64_t micro, const torch::Tensor& input) {
    auto x = input.defined() ? input : torch::full({4}, double(micro + 1), torch::kDouble);
    auto y = torch::matmul(weight, x);
    // The first thing the backward of this micro-batch computes is the loss's or the output's
    // gradient flowing into y.
    y.register_hook([&log, micro](torch::Tensor grad) {
      log.push_back("backward " + std::to_string(micro));
      return grad;
    });
    return me() == n() - 1 ? y.sum() / double(m) : y;
  };
  run_pipeline(noting, options(Schedule::one_f_one_b, m), forward, [] {});
  if (me() == 0) return;  // the first stage receives nothing
  std::vector<int64_t> receive_at;
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i] == "receive") receive_at.push_back(int64_t(i));
  ASSERT_EQ(receive_at.size(), size_t(m));
  const int64_t warmup = n() - me() - 1;
  for (int64_t i = 0; warmup + i + 1 < m; ++i) {
    const auto backward = std::find(log.begin(), log.end(), "backward " + std::to_string(i));
    ASSERT_NE(backward, log.end());
    EXPECT_LT(receive_at[size_t(warmup + i + 1)], backward - log.begin())
        << "input " << warmup + i + 1 << " asked for after backward " << i;
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
