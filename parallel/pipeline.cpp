#include "parallel/pipeline.h"

#include <torch/autograd.h>

#include <deque>

#include "core/error.h"
#include "core/timer.h"

namespace trident {
namespace {

using Forward = std::function<torch::Tensor(int64_t, const torch::Tensor&)>;

// One iteration on one stage: the stored activations and the transfers to the neighbours.
class StageRunner {
 public:
  StageRunner(Communicator& group, const PipelineOptions& options, const Forward& forward)
      : group_(group), options_(options), forward_(forward),
        first_(group.rank() == 0), last_(group.rank() == group.size() - 1) {}

  // Exchanges with the neighbours in one step: sends what is given (an undefined tensor sends
  // nothing, as do sends past either end), receives what is asked for.
  struct Received {
    torch::Tensor from_previous, from_next;
  };
  Received exchange(const torch::Tensor& to_next, const torch::Tensor& to_previous,
                    bool receive_from_previous, bool receive_from_next) {
    std::vector<Communicator::Transfer> transfers;
    Received received;
    if (to_next.defined() && !last_) transfers.push_back({to_next.detach().contiguous(), group_.rank() + 1, true});
    if (to_previous.defined() && !first_)
      transfers.push_back({to_previous.detach().contiguous(), group_.rank() - 1, true});
    if (receive_from_previous && !first_) {
      received.from_previous = torch::empty(options_.activation_shape, options_.activation_options);
      transfers.push_back({received.from_previous, group_.rank() - 1, false});
    }
    if (receive_from_next && !last_) {
      received.from_next = torch::empty(options_.activation_shape, options_.activation_options);
      transfers.push_back({received.from_next, group_.rank() + 1, false});
    }
    if (transfers.empty()) return received;
    Stopwatch stopwatch;
    group_.exchange(transfers);
    stats_.transfer_ms += stopwatch.elapsed_ms();
    return received;
  }

  torch::Tensor forward_step(int64_t micro, torch::Tensor input) {
    if (input.defined()) input.requires_grad_(true);
    torch::Tensor output = forward_(micro, input);
    stored_.push_back({input, output});
    stats_.max_in_flight = std::max<int64_t>(stats_.max_in_flight, int64_t(stored_.size()));
    return last_ ? torch::Tensor() : output;  // the loss stays here
  }

  // Backward of the oldest stored micro-batch; returns the gradient for the previous stage.
  torch::Tensor backward_step(const torch::Tensor& output_grad) {
    auto [input, output] = stored_.front();
    stored_.pop_front();
    if (last_) {
      output.backward();
    } else {
      torch::autograd::backward({output}, {output_grad});
    }
    return input.defined() ? input.grad() : torch::Tensor();
  }

  const PipelineStats& stats() const { return stats_; }

 private:
  Communicator& group_;
  const PipelineOptions& options_;
  const Forward& forward_;
  const bool first_, last_;
  std::deque<std::pair<torch::Tensor, torch::Tensor>> stored_;
  PipelineStats stats_;
};

}  // namespace

PipelineStats run_pipeline(Communicator& group, const PipelineOptions& options,
                           const Forward& forward, const std::function<void()>& before_last_backward) {
  StageRunner stage(group, options, forward);
  const int64_t m = options.micro_batches;
  const torch::Tensor none;
  if (options.schedule == "gpipe") {
    for (int64_t i = 0; i < m; ++i) {
      auto input = stage.exchange(none, none, true, false).from_previous;
      stage.exchange(stage.forward_step(i, input), none, false, false);
    }
    for (int64_t i = 0; i < m; ++i) {
      if (i == m - 1) before_last_backward();
      auto grad = stage.exchange(none, none, false, true).from_next;
      stage.exchange(none, stage.backward_step(grad), false, false);
    }
    return stage.stats();
  }
  if (options.schedule != "1f1b") fail("pipeline schedule '", options.schedule, "' is not available");

  // 1F1B: the stage p - 1 - rank steps from the end runs that many forwards before its first
  // backward, so at most p micro-batches are in flight on the first stage.
  const int64_t warmup = std::min<int64_t>(group.size() - group.rank() - 1, m);
  const int64_t steady = m - warmup;
  for (int64_t i = 0; i < warmup; ++i) {
    auto input = stage.exchange(none, none, true, false).from_previous;
    stage.exchange(stage.forward_step(i, input), none, false, false);
  }
  torch::Tensor input = steady > 0 ? stage.exchange(none, none, true, false).from_previous : none;
  for (int64_t i = 0; i < steady; ++i) {
    const bool last_steady = i == steady - 1;
    auto output = stage.forward_step(warmup + i, input);
    auto grad = stage.exchange(output, none, false, true).from_next;
    if (last_steady && warmup == 0) before_last_backward();
    auto input_grad = stage.backward_step(grad);
    input = stage.exchange(none, input_grad, !last_steady, false).from_previous;
  }
  for (int64_t i = 0; i < warmup; ++i) {
    if (i == warmup - 1) before_last_backward();
    auto grad = stage.exchange(none, none, false, true).from_next;
    stage.exchange(none, stage.backward_step(grad), false, false);
  }
  return stage.stats();
}

void run_pipeline_forward(Communicator& group, const PipelineOptions& options, const Forward& forward) {
  const bool first = group.rank() == 0, last = group.rank() == group.size() - 1;
  for (int64_t i = 0; i < options.micro_batches; ++i) {
    torch::Tensor input;
    if (!first) {
      input = torch::empty(options.activation_shape, options.activation_options);
      group.recv(input, group.rank() - 1);
    }
    torch::Tensor output = forward(i, input);
    if (!last) group.send(output.contiguous(), group.rank() + 1);
  }
}

}  // namespace trident
