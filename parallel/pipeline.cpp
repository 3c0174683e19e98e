#include "parallel/pipeline.h"

#include <torch/autograd.h>

#include <deque>
#include <optional>

#include "core/error.h"
#include "core/timer.h"
#include "parallel/comm/trace_span.h"

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

  // The point-to-point steps of a schedule, named as Megatron names them: "forward" is an
  // activation travelling to the next stage, "backward" its gradient travelling back. Sends and
  // receives that would leave the pipeline are dropped (with one model chunk; with several the
  // ring wraps and the schedule asks only for what exists).
  torch::Tensor recv_forward() { return transfer({}, {}, true, false).from_previous; }
  torch::Tensor recv_backward() { return transfer({}, {}, false, true).from_next; }
  void send_forward(const torch::Tensor& output) { transfer(output, {}, false, false); }
  void send_backward(const torch::Tensor& input_grad) { transfer({}, input_grad, false, false); }
  torch::Tensor send_forward_recv_forward(const torch::Tensor& output, bool receive) {
    return transfer(output, {}, receive, false).from_previous;
  }
  torch::Tensor send_backward_recv_backward(const torch::Tensor& input_grad, bool receive) {
    return transfer({}, input_grad, false, receive).from_next;
  }
  struct Received {
    torch::Tensor from_previous, from_next;
  };
  Received send_forward_backward_recv_forward_backward(const torch::Tensor& output, const torch::Tensor& input_grad,
                                                       bool receive_forward, bool receive_backward) {
    return transfer(output, input_grad, receive_forward, receive_backward);
  }

  // Whether chunk `chunk` of this stage computes the loss (the model's last layers).
  bool holds_loss(int64_t chunk) const { return last() && chunk == options_.virtual_stages - 1; }

  // Runs a forward and stores its input and output; returns what goes to the next stage
  // (nothing after the loss).
  torch::Tensor forward_step(int64_t chunk, int64_t micro, torch::Tensor input) {
    TRIDENT_TRACE_SPAN("pipeline forward: micro-batch ", micro, ", chunk ", chunk);
    if (input.defined()) input.requires_grad_(true);
    torch::Tensor output = forward_(chunk, micro, input);
    chunks_[size_t(chunk)].push_back({input, output, micro});
    ++in_flight_;
    stats_.max_in_flight = std::max(stats_.max_in_flight, in_flight_);
    return holds_loss(chunk) ? torch::Tensor() : output;
  }

  // Backward of the oldest stored micro-batch of `chunk`; returns the gradient of its input.
  torch::Tensor backward_step(int64_t chunk, const torch::Tensor& output_grad) {
    auto& stored = chunks_[size_t(chunk)];
    TRIDENT_CHECK(!stored.empty(), "backward of chunk ", chunk, " with no forward stored");
    auto [input, output, micro] = stored.front();
    stored.pop_front();
    TRIDENT_TRACE_SPAN("pipeline backward: micro-batch ", micro, ", chunk ", chunk);
    --in_flight_;
    if (holds_loss(chunk)) {
      output.backward();
    } else {
      TRIDENT_CHECK(output_grad.defined(), "backward of chunk ", chunk, " without its output's gradient");
      torch::autograd::backward({output}, {output_grad});
    }
    return input.defined() ? input.grad() : torch::Tensor();
  }

  const PipelineStats& stats() const { return stats_; }

  // An exchange posted now, so that it proceeds while this stage computes; complete() waits for
  // it (on a GPU: orders the compute stream after it) and gives what it received.
  struct Posted {
    std::unique_ptr<PendingCollective> pending;  // none when nothing was to be exchanged
    Received received;
  };
  Posted post(torch::Tensor to_next, torch::Tensor to_previous, bool receive_from_previous, bool receive_from_next) {
    if (options_.virtual_stages == 1) {
      if (last()) to_next = torch::Tensor(), receive_from_next = false;
      if (first()) to_previous = torch::Tensor(), receive_from_previous = false;
    }
    const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
    std::vector<Communicator::Transfer> transfers;
    Posted posted;
    if (to_next.defined()) transfers.push_back({to_next.detach().contiguous(), next, true});
    if (to_previous.defined()) transfers.push_back({to_previous.detach().contiguous(), previous, true});
    if (receive_from_previous) {
      posted.received.from_previous = torch::empty(options_.activation_shape, options_.activation_options);
      transfers.push_back({posted.received.from_previous, previous, false});
    }
    if (receive_from_next) {
      posted.received.from_next = torch::empty(options_.activation_shape, options_.activation_options);
      transfers.push_back({posted.received.from_next, next, false});
    }
    if (!transfers.empty()) posted.pending = group_.exchange_async(std::move(transfers), "exchange");
    return posted;
  }
  Received complete(Posted& posted) {
    if (posted.pending) {
      Stopwatch stopwatch;
      posted.pending->wait();
      stats_.transfer_ms += stopwatch.elapsed_ms();
      posted.pending.reset();
    }
    return posted.received;
  }
  // A send nothing here waits for: completed at the end of the iteration (finish()), its tensor
  // held until then.
  void post_send(torch::Tensor to_next, torch::Tensor to_previous) {
    Posted posted = post(std::move(to_next), std::move(to_previous), false, false);
    if (posted.pending) sends_.push_back(std::move(posted));
  }
  // The end of the iteration on this stage: the sends complete, every forward was backwarded.
  void finish() {
    for (auto& send : sends_) complete(send);
    sends_.clear();
    check_done();
  }

 private:
  // Sends the defined tensors and receives what is asked for, all in one exchange that cannot
  // deadlock (two neighbours sending to each other).
  Received transfer(torch::Tensor to_next, torch::Tensor to_previous, bool receive_from_previous,
                    bool receive_from_next) {
    Posted posted = post(std::move(to_next), std::move(to_previous), receive_from_previous, receive_from_next);
    return complete(posted);
  }

  // Every forward was backwarded: the schedule ran each micro-batch through both.
  void check_done() const {
    TRIDENT_CHECK(in_flight_ == 0, in_flight_, " micro-batches forwarded but never backwarded");
    for (const auto& stored : chunks_) TRIDENT_CHECK(stored.empty(), "activations left in a chunk");
  }

  Communicator& group_;
  const PipelineOptions& options_;
  const PipelineForward& forward_;
  struct Stored {
    torch::Tensor input, output;
    int64_t micro;
  };
  std::vector<std::deque<Stored>> chunks_;
  const int rank_, size_;
  int64_t in_flight_ = 0;
  std::vector<Posted> sends_;
  PipelineStats stats_;
};

void run_gpipe(StageRunner& stage, int64_t m, const std::function<void()>& before_last_backward) {
  for (int64_t i = 0; i < m; ++i) stage.send_forward(stage.forward_step(0, i, stage.recv_forward()));
  for (int64_t i = 0; i < m; ++i) {
    if (i == m - 1) before_last_backward();
    stage.send_backward(stage.backward_step(0, stage.recv_backward()));
  }
}

// 1F1B: the stage p - 1 - rank steps from the end runs that many forwards before its first
// backward, so at most p micro-batches are in flight on the first stage. In the steady state
// the next input is asked for before the backward and the input's gradient sent without
// waiting, so both travel while this stage computes:
//
//   forward i ─ post(send output i, receive its gradient) ─ post(receive input i+1)
//   wait(gradient i) ─ backward i ─ post(send gradient of input i) ─ wait(input i+1) ─ forward i+1
//
// Each link carries one kind of message in micro-batch order (activations r -> r+1, gradients
// r+1 -> r), so receives posted early still match their sends.
void run_1f1b(StageRunner& stage, int64_t m, int64_t stages, int64_t rank,
              const std::function<void()>& before_last_backward) {
  const int64_t warmup = std::min<int64_t>(stages - rank - 1, m);
  const int64_t steady = m - warmup;
  for (int64_t i = 0; i < warmup; ++i) stage.send_forward(stage.forward_step(0, i, stage.recv_forward()));
  torch::Tensor input = steady > 0 ? stage.recv_forward() : torch::Tensor();
  for (int64_t i = 0; i < steady; ++i) {
    const bool last_steady = i == steady - 1;
    auto gradient = stage.post(stage.forward_step(0, warmup + i, input), {}, false, true);
    auto next_input = stage.post({}, {}, !last_steady, false);
    const torch::Tensor grad = stage.complete(gradient).from_next;
    if (last_steady && warmup == 0) before_last_backward();
    stage.post_send({}, stage.backward_step(0, grad));
    input = stage.complete(next_input).from_previous;
  }
  for (int64_t i = 0; i < warmup; ++i) {
    if (i == warmup - 1) before_last_backward();
    stage.send_backward(stage.backward_step(0, stage.recv_backward()));
  }
}

// Interleaved 1F1B (Narayanan et al. 2021, section 2.2): v model chunks per stage, virtual
// micro-batch k runs chunk (k / p) % v forward and the mirrored chunk backward; the warm-up is
// 2 (p - rank - 1) + (v - 1) p forwards. Inputs and output gradients arrive one exchange ahead
// of their use and wait in per-chunk queues.
// Which way a virtual micro-batch runs through the chunks: forward in order, backward mirrored.
enum class Direction { forward, backward };

class Interleaved {
 public:
  Interleaved(StageRunner& stage, int64_t v, int64_t p)
      : stage_(stage), v_(v), p_(p), inputs_(size_t(v)), output_grads_(size_t(v)) {}

  // The chunk virtual micro-batch k runs in `direction` (k may be negative, before the first).
  int64_t chunk_of(int64_t k, Direction direction) const {
    const int64_t group = p_ * v_;
    const int64_t chunk = ((k % group + group) % group) / p_;  // floor modulo
    return direction == Direction::forward ? chunk : v_ - 1 - chunk;
  }
  int64_t micro_of(int64_t k) const { return k / (p_ * v_) * p_ + k % p_; }

  // In the steady state, which of this rank's chunks the activation (forward) or gradient
  // (backward) that arrives with step k is for; nothing when none arrives.
  //
  //   activations travel rank r -> r+1 within a chunk, and wrap from the last rank's chunk c to
  //   the first rank's chunk c+1; gradients travel back and wrap from the first rank's chunk c
  //   to the last rank's chunk c-1:
  //
  //     p = 3, v = 2:   r0:c0 -> r1:c0 -> r2:c0 ~~wrap~~> r0:c1 -> r1:c1 -> r2:c1 (loss)
  //
  //   Away from the wrap the neighbour's step k feeds this rank's step k + 1 (same chunk). At
  //   the wrap the sender is the far end, p - 1 virtual micro-batches behind: it ran step
  //   k - (p - 1) on chunk c, which feeds chunk c + 1 (forward) or c - 1 (backward), unless c
  //   was the model's last chunk (forward: the loss) or first (backward: the embedding).
  std::optional<int64_t> arriving_chunk(int64_t k, Direction direction) const {
    const bool forward = direction == Direction::forward;
    const bool at_wrap = forward ? stage_.first() : stage_.last();
    if (!at_wrap) return chunk_of(k + 1, direction);
    const int64_t sent = chunk_of(k - (p_ - 1), direction);
    if (sent == (forward ? v_ - 1 : 0)) return std::nullopt;
    return forward ? sent + 1 : sent - 1;
  }

  torch::Tensor forward(int64_t k) {
    const int64_t chunk = chunk_of(k, Direction::forward);
    torch::Tensor input;  // the model's first layers take tokens, not a received activation
    if (!(stage_.first() && chunk == 0)) input = take(inputs_[size_t(chunk)], "input", chunk);
    return stage_.forward_step(chunk, micro_of(k), input);
  }
  torch::Tensor backward(int64_t k) {
    const int64_t chunk = chunk_of(k, Direction::backward);
    torch::Tensor grad;
    if (!stage_.holds_loss(chunk)) grad = take(output_grads_[size_t(chunk)], "output gradient", chunk);
    return stage_.backward_step(chunk, grad);
  }
  void arrived_input(int64_t chunk, torch::Tensor input) { inputs_[size_t(chunk)].push_back(std::move(input)); }
  void arrived_output_grad(int64_t chunk, torch::Tensor grad) {
    output_grads_[size_t(chunk)].push_back(std::move(grad));
  }

  void check_done() const {
    for (int64_t c = 0; c < v_; ++c) {
      TRIDENT_CHECK(inputs_[size_t(c)].empty(), "inputs left for chunk ", c);
      TRIDENT_CHECK(output_grads_[size_t(c)].empty(), "output gradients left for chunk ", c);
    }
  }

 private:
  torch::Tensor take(std::deque<torch::Tensor>& queue, const char* what, int64_t chunk) {
    TRIDENT_CHECK(!queue.empty(), "no ", what, " arrived for chunk ", chunk);
    torch::Tensor t = queue.front();
    queue.pop_front();
    return t;
  }

  StageRunner& stage_;
  const int64_t v_, p_;
  std::vector<std::deque<torch::Tensor>> inputs_, output_grads_;
};

void run_interleaved(StageRunner& stage, int64_t m, int64_t v, int64_t p, int64_t rank,
                     const std::function<void()>& before_last_backward) {
  Interleaved run(stage, v, p);
  const int64_t total = m * v;
  const bool all_warmup = m == p;
  const int64_t warmup = all_warmup ? total : std::min(total, 2 * (p - rank - 1) + (v - 1) * p);
  const int64_t remaining = total - warmup;
  auto backward = [&](int64_t k) {
    if (k == total - 1) before_last_backward();
    return run.backward(k);
  };

  if (!stage.first()) run.arrived_input(0, stage.recv_forward());
  for (int64_t k = 0; k < warmup; ++k) {
    torch::Tensor output = run.forward(k);
    const int64_t next_chunk = run.chunk_of(k + 1, Direction::forward);
    const bool receive_forward = !(stage.first() && next_chunk == 0) && k != total - 1;
    // The last warm-up step also receives the first output gradient, one step ahead.
    const bool receive_backward = k == warmup - 1 && !all_warmup && !stage.last();
    auto got = stage.send_forward_backward_recv_forward_backward(output, {}, receive_forward, receive_backward);
    if (receive_backward) run.arrived_output_grad(v - 1, got.from_next);
    if (receive_forward) run.arrived_input(next_chunk, got.from_previous);
  }
  for (int64_t k = 0; k < remaining; ++k) {
    const int64_t forward_k = k + warmup;
    torch::Tensor output = run.forward(forward_k);
    torch::Tensor input_grad = backward(k);
    std::optional<int64_t> input_for = run.arriving_chunk(forward_k, Direction::forward);
    const std::optional<int64_t> grad_for = run.arriving_chunk(k, Direction::backward);
    if (k == remaining - 1) input_for.reset();
    auto got = stage.send_forward_backward_recv_forward_backward(output, input_grad, input_for.has_value(),
                                                                 grad_for.has_value());
    if (input_for) run.arrived_input(*input_for, got.from_previous);
    if (grad_for) run.arrived_output_grad(*grad_for, got.from_next);
  }
  if (all_warmup && !stage.last()) run.arrived_output_grad(v - 1, stage.recv_backward());
  for (int64_t k = remaining; k < total; ++k) {
    torch::Tensor input_grad = backward(k);
    const int64_t next_chunk = run.chunk_of(k + 1, Direction::backward);
    const bool receive = !(stage.last() && next_chunk == v - 1) && k != total - 1;
    torch::Tensor grad = stage.send_backward_recv_backward(input_grad, receive);
    if (receive) run.arrived_output_grad(next_chunk, grad);
  }
  run.check_done();
  stage.finish();
}

}  // namespace

PipelineStats run_pipeline(Communicator& group, const PipelineOptions& options,
                           const PipelineForward& forward,
                           const std::function<void()>& before_last_backward) {
  StageRunner stage(group, options, forward);
  const int64_t m = options.micro_batches;
  if (options.schedule == Schedule::gpipe) {
    run_gpipe(stage, m, before_last_backward);
    stage.finish();
  } else if (options.schedule == Schedule::one_f_one_b) {
    run_1f1b(stage, m, group.size(), group.rank(), before_last_backward);
    stage.finish();
  } else {
    TRIDENT_CHECK(m % group.size() == 0, "interleaved 1F1B needs the micro-batch count (", m,
                  ") to be a multiple of the pipeline size (", group.size(), ")");
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
