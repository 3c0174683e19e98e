#include "parallel/pipeline.h"

#include <torch/autograd.h>

#include <map>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "core/timer.h"
#include "parallel/comm/trace_span.h"
#include "parallel/split_backward.h"

namespace trident {
namespace {

using Kind = PipelineMessage::Kind;
// A message by what it is: an activation for a stage's input, or a gradient for its output.
using MessageKey = std::tuple<Kind, int64_t, int64_t>;  // kind, stage, micro-batch

const char* name(Kind kind) { return kind == Kind::activation ? "activation" : "gradient"; }

// One iteration on one stage: the activations held per (stage, micro-batch), the messages on
// their way, and the exchanges posted.
class StageRunner {
 public:
  StageRunner(Communicator& group, const PipelineOptions& options, const PipelineForward& forward)
      : group_(group), schedule_(options.schedule), options_(options), forward_(forward), rank_(group.rank()) {}

  void run(const std::function<void()>& arm) {
    for (const ProgramStep& step : options_.program) {
      switch (step.type) {
        case ProgramStep::Type::arm: arm(); break;
        case ProgramStep::Type::exchange: post(step.messages); break;
        case ProgramStep::Type::compute: compute(step.action); break;
      }
    }
    finish();
  }

  const PipelineStats& stats() const { return stats_; }

 private:
  struct Stored {
    torch::Tensor input, output;
    WeightGrads weights;  // a split backward's W, between its I and its W
  };
  // An exchange posted and not yet waited for (its received tensors are in arrived_ already).
  struct Posted {
    std::unique_ptr<PendingCollective> pending;
  };

  bool holds_loss(int64_t stage) const { return stage == schedule_.stages() - 1; }

  void compute(const PipelineAction& a) {
    const double start = clock_.elapsed_ms();
    switch (a.kind) {
      case ActionKind::forward: forward(a); break;
      case ActionKind::backward:
      case ActionKind::input_grad: backward(a); break;
      case ActionKind::weight_grad: weights(a); break;
    }
    stats_.actions.push_back({a, start, clock_.elapsed_ms()});
  }

  void forward(const PipelineAction& a) {
    const int64_t chunk = schedule_.chunk_of_stage[size_t(a.stage)];
    TRIDENT_TRACE_SPAN("pipeline forward: micro-batch ", a.micro, ", chunk ", chunk);
    torch::Tensor input;  // the model's first layers take tokens, not an activation
    if (a.stage > 0) input = take({Kind::activation, a.stage, a.micro}).requires_grad_(true);
    torch::Tensor output = forward_(chunk, a.micro, input);
    stored_[{a.stage, a.micro}] = {input, output, {}};
    stats_.max_in_flight = std::max(stats_.max_in_flight, int64_t(stored_.size()));
    if (!holds_loss(a.stage)) leave({Kind::activation, a.stage + 1, a.micro}, output);
  }

  // B, or a split backward's I: the gradient of the input goes to the previous stage.
  void backward(const PipelineAction& a) {
    const int64_t chunk = schedule_.chunk_of_stage[size_t(a.stage)];
    const bool split = a.kind == ActionKind::input_grad;
    TRIDENT_TRACE_SPAN("pipeline ", split ? "input gradient" : "backward", ": micro-batch ", a.micro, ", chunk ",
                       chunk);
    auto held = stored_.find({a.stage, a.micro});
    TRIDENT_CHECK(held != stored_.end(), "backward of stage ", a.stage, ", micro-batch ", a.micro,
                  " before its forward");
    Stored& stored = held->second;
    torch::Tensor grad;  // of the output; none for the loss
    if (!holds_loss(a.stage)) grad = take({Kind::gradient, a.stage, a.micro});
    torch::Tensor input_grad;
    if (split) {
      SplitRecomputedBlocks split_blocks(stored.weights);
      std::vector<torch::Tensor> inputs;
      if (stored.input.defined()) inputs.push_back(stored.input);
      const auto grads = backward_inputs({stored.output}, {grad}, inputs, stored.weights);
      if (stored.input.defined()) input_grad = grads.front();
      stored.input = stored.output = torch::Tensor();  // W keeps what it needs of the graph
    } else {
      if (holds_loss(a.stage)) stored.output.backward();
      else torch::autograd::backward({stored.output}, {grad});
      if (stored.input.defined()) input_grad = stored.input.grad();
      stored_.erase(held);
    }
    if (a.stage > 0) leave({Kind::gradient, a.stage - 1, a.micro}, input_grad);
  }

  void weights(const PipelineAction& a) {
    TRIDENT_TRACE_SPAN("pipeline weight gradient: micro-batch ", a.micro, ", chunk ",
                       schedule_.chunk_of_stage[size_t(a.stage)]);
    auto held = stored_.find({a.stage, a.micro});
    TRIDENT_CHECK(held != stored_.end(), "W of stage ", a.stage, ", micro-batch ", a.micro, " without its I");
    held->second.weights.run();
    stored_.erase(held);
  }

  // What an action hands on: kept here when this rank runs the stage it is for, else sent in
  // the next exchange that names it.
  void leave(const MessageKey& key, const torch::Tensor& tensor) {
    const int64_t stage = std::get<1>(key);
    TRIDENT_CHECK(tensor.defined(), "no ", name(std::get<0>(key)), " to hand on for stage ", stage);
    if (schedule_.rank_of_stage[size_t(stage)] == rank_) arrived_[key] = tensor.detach();
    else leaving_[key] = tensor.detach().contiguous();
  }

  // Posts one exchange: its sends, and receives into fresh tensors that arrive when it completes.
  void post(const std::vector<PipelineMessage>& messages) {
    std::vector<Communicator::Transfer> transfers;
    auto posted = std::make_shared<Posted>();
    for (const PipelineMessage& m : messages) {
      const MessageKey key{m.kind, m.stage, m.micro};
      if (m.send) {
        auto leaving = leaving_.find(key);
        TRIDENT_CHECK(leaving != leaving_.end(), "the ", name(m.kind), " for stage ", m.stage, ", micro-batch ",
                      m.micro, " is to be sent before it is computed");
        transfers.push_back({leaving->second, m.peer, true});
        leaving_.erase(leaving);
      } else {
        torch::Tensor received = torch::empty(options_.activation_shape, options_.activation_options);
        transfers.push_back({received, m.peer, false});
        arrived_[key] = received;
        waiting_[key] = posted;
      }
    }
    posted->pending = group_.exchange_async(std::move(transfers), "exchange");
    posted_.push_back(posted);
  }

  void complete(Posted& posted) {
    if (!posted.pending) return;
    Stopwatch stopwatch;
    posted.pending->wait();  // on a GPU: orders the compute stream after it
    stats_.transfer_ms += stopwatch.elapsed_ms();
    posted.pending.reset();
  }

  torch::Tensor take(const MessageKey& key) {
    auto arrived = arrived_.find(key);
    TRIDENT_CHECK(arrived != arrived_.end(), "no ", name(std::get<0>(key)), " arrived for stage ", std::get<1>(key),
                  ", micro-batch ", std::get<2>(key));
    if (auto waiting = waiting_.find(key); waiting != waiting_.end()) {
      complete(*waiting->second);
      waiting_.erase(waiting);
    }
    torch::Tensor tensor = arrived->second;
    arrived_.erase(arrived);
    return tensor;
  }

  // The end of the iteration on this stage: every exchange complete, every message used, every
  // forward's activations released.
  void finish() {
    for (auto& posted : posted_) complete(*posted);
    posted_.clear();
    TRIDENT_CHECK(stored_.empty(), stored_.size(), " micro-batches forwarded but never backwarded");
    TRIDENT_CHECK(arrived_.empty() && leaving_.empty(), arrived_.size() + leaving_.size(),
                  " pipeline messages left unused");
  }

  Communicator& group_;
  const PipelineSchedule& schedule_;
  const PipelineOptions& options_;
  const PipelineForward& forward_;
  const int rank_;
  std::map<std::pair<int64_t, int64_t>, Stored> stored_;  // by (stage, micro-batch)
  std::map<MessageKey, torch::Tensor> leaving_, arrived_;
  std::map<MessageKey, std::shared_ptr<Posted>> waiting_;  // received in an exchange not yet waited for
  std::vector<std::shared_ptr<Posted>> posted_;
  PipelineStats stats_;
  Stopwatch clock_;
};

}  // namespace

PipelineOptions pipeline_options(PipelineSchedule schedule, int rank, std::vector<int64_t> activation_shape,
                                 torch::TensorOptions activation_options) {
  PipelineOptions options;
  options.program = rank_program(schedule, rank);
  options.schedule = std::move(schedule);
  options.rank = rank;
  options.activation_shape = std::move(activation_shape);
  options.activation_options = activation_options;
  return options;
}

PipelineStats run_pipeline(Communicator& group, const PipelineOptions& options, const PipelineForward& forward,
                           const std::function<void()>& arm) {
  TRIDENT_CHECK(options.schedule.ranks() == group.size() && options.rank == group.rank(), "the program of rank ",
                options.rank, " of a ", options.schedule.ranks(), "-rank schedule on rank ", group.rank(), " of ",
                group.size());
  StageRunner stage(group, options, forward);
  stage.run(arm);
  return stage.stats();
}

void run_pipeline_forward(Communicator& group, const PipelineOptions& options, const PipelineForward& forward) {
  const PipelineSchedule& schedule = options.schedule;
  const int rank = group.rank();
  const int64_t stages = schedule.stages();
  auto rank_of = [&](int64_t stage) { return int(schedule.rank_of_stage[size_t(stage)]); };
  for (int64_t micro = 0; micro < schedule.micro_batches; ++micro) {
    torch::Tensor carried;  // an activation passed between two stages of this rank
    for (int64_t stage = 0; stage < stages; ++stage) {
      if (rank_of(stage) != rank) continue;
      torch::Tensor input;
      if (stage > 0 && rank_of(stage - 1) == rank) {
        input = carried;
      } else if (stage > 0) {
        input = torch::empty(options.activation_shape, options.activation_options);
        group.recv(input, rank_of(stage - 1));
      }
      torch::Tensor output = forward(schedule.chunk_of_stage[size_t(stage)], micro, input);
      if (stage == stages - 1) continue;
      if (rank_of(stage + 1) == rank) carried = output;
      else group.send(output.contiguous(), rank_of(stage + 1));
    }
  }
}

}  // namespace trident
