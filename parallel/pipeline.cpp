#include "parallel/pipeline.h"

#include <torch/autograd.h>

#include <deque>

#include "core/error.h"
#include "core/timer.h"

namespace trident {
namespace {

// One iteration on one stage: the stored activations of each model chunk and the transfers to
// the neighbouring stages. With interleaving the ring wraps: the last stage's chunk c feeds the
// first stage's chunk c + 1.
class StageRunner {
 public:
  StageRunner(Communicator& group, const PipelineOptions& options, const PipelineForward& forward)
      : group_(group), options_(options), forward_(forward), chunks_(size_t(options.virtual_stages)),
        rank_(group.rank()), size_(group.size()) {}

  bool first() const { return rank_ == 0; }
  bool last() const { return rank_ == size_ - 1; }
  int next() const { return (rank_ + 1) % size_; }
  int previous() const { return (rank_ + size_ - 1) % size_; }

  // Exchanges with the neighbours in one step: sends the defined tensors, receives what is
  // asked for. Sends and receives that would leave the pipeline must not be asked for; with one
  // model chunk they are dropped here.
  struct Received {
    torch::Tensor from_previous, from_next;
  };
  Received exchange(torch::Tensor to_next, torch::Tensor to_previous, bool receive_from_previous,
                    bool receive_from_next) {
    if (options_.virtual_stages == 1) {
      if (last()) to_next = torch::Tensor(), receive_from_next = false;
      if (first()) to_previous = torch::Tensor(), receive_from_previous = false;
    }
    std::vector<Communicator::Transfer> transfers;
    Received received;
    if (to_next.defined()) transfers.push_back({to_next.detach().contiguous(), next(), true});
    if (to_previous.defined()) transfers.push_back({to_previous.detach().contiguous(), previous(), true});
    if (receive_from_previous) {
      received.from_previous = torch::empty(options_.activation_shape, options_.activation_options);
      transfers.push_back({received.from_previous, previous(), false});
    }
    if (receive_from_next) {
      received.from_next = torch::empty(options_.activation_shape, options_.activation_options);
      transfers.push_back({received.from_next, next(), false});
    }
    if (transfers.empty()) return received;
    Stopwatch stopwatch;
    group_.exchange(transfers);
    stats_.transfer_ms += stopwatch.elapsed_ms();
    return received;
  }

  // Whether chunk `chunk` of this stage computes the loss (the model's last layers).
  bool holds_loss(int64_t chunk) const { return last() && chunk == options_.virtual_stages - 1; }

  // Runs a forward and stores its input and output; returns what goes to the next stage
  // (nothing after the loss).
  torch::Tensor forward_step(int64_t chunk, int64_t micro, torch::Tensor input) {
    if (input.defined()) input.requires_grad_(true);
    torch::Tensor output = forward_(chunk, micro, input);
    chunks_[size_t(chunk)].push_back({input, output});
    ++in_flight_;
    stats_.max_in_flight = std::max(stats_.max_in_flight, in_flight_);
    return holds_loss(chunk) ? torch::Tensor() : output;
  }

  // Backward of the oldest stored micro-batch of `chunk`; returns the gradient of its input.
  torch::Tensor backward_step(int64_t chunk, const torch::Tensor& output_grad) {
    auto [input, output] = chunks_[size_t(chunk)].front();
    chunks_[size_t(chunk)].pop_front();
    --in_flight_;
    if (holds_loss(chunk)) {
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
  const PipelineForward& forward_;
  std::vector<std::deque<std::pair<torch::Tensor, torch::Tensor>>> chunks_;
  const int rank_, size_;
  int64_t in_flight_ = 0;
  PipelineStats stats_;
};

void run_gpipe(StageRunner& stage, int64_t m, const std::function<void()>& before_last_backward) {
  const torch::Tensor none;
  for (int64_t i = 0; i < m; ++i) {
    auto input = stage.exchange(none, none, true, false).from_previous;
    stage.exchange(stage.forward_step(0, i, input), none, false, false);
  }
  for (int64_t i = 0; i < m; ++i) {
    if (i == m - 1) before_last_backward();
    auto grad = stage.exchange(none, none, false, true).from_next;
    stage.exchange(none, stage.backward_step(0, grad), false, false);
  }
}

// 1F1B: the stage p - 1 - rank steps from the end runs that many forwards before its first
// backward, so at most p micro-batches are in flight on the first stage.
void run_1f1b(StageRunner& stage, int64_t m, int64_t stages, int64_t rank,
              const std::function<void()>& before_last_backward) {
  const torch::Tensor none;
  const int64_t warmup = std::min<int64_t>(stages - rank - 1, m);
  const int64_t steady = m - warmup;
  for (int64_t i = 0; i < warmup; ++i) {
    auto input = stage.exchange(none, none, true, false).from_previous;
    stage.exchange(stage.forward_step(0, i, input), none, false, false);
  }
  torch::Tensor input = steady > 0 ? stage.exchange(none, none, true, false).from_previous : none;
  for (int64_t i = 0; i < steady; ++i) {
    const bool last_steady = i == steady - 1;
    auto output = stage.forward_step(0, warmup + i, input);
    auto grad = stage.exchange(output, none, false, true).from_next;
    if (last_steady && warmup == 0) before_last_backward();
    auto input_grad = stage.backward_step(0, grad);
    input = stage.exchange(none, input_grad, !last_steady, false).from_previous;
  }
  for (int64_t i = 0; i < warmup; ++i) {
    if (i == warmup - 1) before_last_backward();
    auto grad = stage.exchange(none, none, false, true).from_next;
    stage.exchange(none, stage.backward_step(0, grad), false, false);
  }
}

// Interleaved 1F1B (Narayanan et al. 2021, section 2.2): v model chunks per stage, virtual
// micro-batch k runs chunk (k / p) % v forward and the mirrored chunk backward; the warm-up is
// 2 (p - rank - 1) + (v - 1) p forwards. Inputs and output gradients arrive one exchange ahead
// of their use and wait in per-chunk queues.
void run_interleaved(StageRunner& stage, int64_t m, int64_t v, int64_t p, int64_t rank,
                     const std::function<void()>& before_last_backward) {
  const torch::Tensor none;
  const int64_t total = m * v;
  const bool all_warmup = m == p;
  const int64_t warmup = all_warmup ? total : std::min(total, 2 * (p - rank - 1) + (v - 1) * p);
  const int64_t remaining = total - warmup;
  auto chunk_of = [&](int64_t k, bool forward) {
    const int64_t group = p * v;
    const int64_t chunk = ((k % group + group) % group) / p;  // k may be negative: floor modulo
    return forward ? chunk : v - 1 - chunk;
  };
  auto micro_of = [&](int64_t k) { return k / (p * v) * p + k % p; };
  std::vector<std::deque<torch::Tensor>> inputs(static_cast<size_t>(v)), output_grads(static_cast<size_t>(v));
  auto forward = [&](int64_t k) {
    const int64_t chunk = chunk_of(k, true);
    torch::Tensor input;  // the model's first layers take tokens, not a received activation
    if (!(stage.first() && chunk == 0)) {
      input = inputs[size_t(chunk)].front();
      inputs[size_t(chunk)].pop_front();
    }
    return stage.forward_step(chunk, micro_of(k), input);
  };
  auto backward = [&](int64_t k) {
    if (k == total - 1) before_last_backward();
    const int64_t chunk = chunk_of(k, false);
    torch::Tensor grad;
    if (!stage.holds_loss(chunk)) {
      grad = output_grads[size_t(chunk)].front();
      output_grads[size_t(chunk)].pop_front();
    }
    return stage.backward_step(chunk, grad);
  };

  if (!stage.first()) inputs[0].push_back(stage.exchange(none, none, true, false).from_previous);
  for (int64_t k = 0; k < warmup; ++k) {
    torch::Tensor output = forward(k);
    const int64_t next_chunk = chunk_of(k + 1, true);
    const bool receive_previous = !(stage.first() && next_chunk == 0) && k != total - 1;
    // The last warm-up step also receives the first output gradient, one step ahead.
    const bool receive_next = k == warmup - 1 && !all_warmup && !stage.last();
    auto got = stage.exchange(output, none, receive_previous, receive_next);
    if (receive_next) output_grads[size_t(v - 1)].push_back(got.from_next);
    if (receive_previous) inputs[size_t(next_chunk)].push_back(got.from_previous);
  }
  for (int64_t k = 0; k < remaining; ++k) {
    const int64_t forward_k = k + warmup;
    torch::Tensor output = forward(forward_k);
    torch::Tensor input_grad = backward(k);

    bool receive_previous = true;
    int64_t next_forward_chunk;
    if (stage.first()) {
      next_forward_chunk = chunk_of(forward_k - (p - 1), true);
      if (next_forward_chunk == v - 1) receive_previous = false;
      ++next_forward_chunk;
    } else {
      next_forward_chunk = chunk_of(forward_k + 1, true);
    }
    bool receive_next = true;
    int64_t next_backward_chunk;
    if (stage.last()) {
      next_backward_chunk = chunk_of(k - (p - 1), false);
      if (next_backward_chunk == 0) receive_next = false;
      --next_backward_chunk;
    } else {
      next_backward_chunk = chunk_of(k + 1, false);
    }
    if (k == remaining - 1) receive_previous = false;
    auto got = stage.exchange(output, input_grad, receive_previous, receive_next);
    if (receive_previous) inputs[size_t(next_forward_chunk)].push_back(got.from_previous);
    if (receive_next) output_grads[size_t(next_backward_chunk)].push_back(got.from_next);
  }
  if (all_warmup && !stage.last())
    output_grads[size_t(v - 1)].push_back(stage.exchange(none, none, false, true).from_next);
  for (int64_t k = remaining; k < total; ++k) {
    torch::Tensor input_grad = backward(k);
    const int64_t next_chunk = chunk_of(k + 1, false);
    const bool receive_next = !(stage.last() && next_chunk == v - 1) && k != total - 1;
    auto got = stage.exchange(none, input_grad, false, receive_next);
    if (receive_next) output_grads[size_t(next_chunk)].push_back(got.from_next);
  }
}

}  // namespace

PipelineStats run_pipeline(Communicator& group, const PipelineOptions& options,
                           const PipelineForward& forward,
                           const std::function<void()>& before_last_backward) {
  StageRunner stage(group, options, forward);
  const int64_t m = options.micro_batches;
  if (options.schedule == Schedule::gpipe) {
    run_gpipe(stage, m, before_last_backward);
  } else if (options.schedule == Schedule::one_f_one_b) {
    run_1f1b(stage, m, group.size(), group.rank(), before_last_backward);
  } else {
    if (m % group.size() != 0)
      fail("interleaved 1F1B needs the micro-batch count (", m, ") to be a multiple of the ",
           "pipeline size (", group.size(), ")");
    run_interleaved(stage, m, options.virtual_stages, group.size(), group.rank(), before_last_backward);
  }
  return stage.stats();
}

void run_pipeline_forward(Communicator& group, const PipelineOptions& options,
                          const PipelineForward& forward) {
  // Virtual stage c * p + r runs chunk c on rank r; activations travel around the ring v times.
  const int p = group.size(), rank = group.rank();
  const int64_t v = options.virtual_stages;
  for (int64_t i = 0; i < options.micro_batches; ++i) {
    for (int64_t chunk = 0; chunk < v; ++chunk) {
      const bool model_first = rank == 0 && chunk == 0;
      const bool model_last = rank == p - 1 && chunk == v - 1;
      torch::Tensor input;
      if (!model_first) {
        input = torch::empty(options.activation_shape, options.activation_options);
        group.recv(input, (rank + p - 1) % p);
      }
      torch::Tensor output = forward(chunk, i, input);
      if (!model_last) group.send(output.contiguous(), (rank + 1) % p);
    }
  }
}

}  // namespace trident
