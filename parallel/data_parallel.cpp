#include "parallel/data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"
#include "parallel/comm/backends.h"
#include "parallel/linear_multiply.h"

namespace trident {
namespace {
// Stage 2 lets this many bucket reductions run at once before waiting for the oldest: enough
// to overlap with backward, few enough to bound the transient bucket memory.
constexpr size_t kMaxInFlight = 2;
}  // namespace

// Runs after AccumulateGrad has added a micro-batch's gradient into .grad.
class DataParallelGrads::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(DataParallelGrads* owner, size_t param) : owner_(owner), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    owner_->on_ready(param_);
    return outputs;
  }

 private:
  DataParallelGrads* owner_;
  size_t param_;
};

FlatBuckets make_grad_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes,
                              torch::Dtype dtype, const ZeroSharding& zero,
                              const std::vector<int64_t>& groups) {
  std::vector<int64_t> numels;
  for (const auto& p : params) numels.push_back(p.numel());
  const int64_t elements = std::max<int64_t>(1, bucket_bytes / int64_t(torch::elementSize(dtype)));
  return make_flat_buckets(numels, elements, zero.shards(), groups);
}

DataParallelGrads::DataParallelGrads(std::vector<torch::Tensor> params, FlatBuckets flat,
                                     Communicator& dp_group, GradBufferOptions options)
    : group_(dp_group), options_(options), flat_(std::move(flat)), params_(std::move(params)) {
  const ZeroSharding& zero = options_.zero;
  TRIDENT_CHECK(zero.replicas == group_.size() && flat_.shards == zero.shards(), "buckets padded for ",
                flat_.shards, " shards at ZeRO stage ", zero.stage, " over ", group_.size(), " ranks");
  TRIDENT_CHECK(flat_.numel.size() == params_.size(), "buckets for ", flat_.numel.size(), " of ",
                params_.size(), " parameters");
  buckets_.resize(flat_.buckets.size());

  const auto on = params_.front().options().dtype(options_.dtype).requires_grad(false);
  if (!options_.zero.shards_grads()) {
    buffer_ = torch::zeros({flat_.total}, on);
    for (size_t b = 0; b < buckets_.size(); ++b)
      buckets_[b].storage = buffer_.narrow(0, flat_.buckets[b].start, flat_.buckets[b].numel);
  }
  if (options_.zero.reduce_scatters()) shard_ = torch::zeros({flat_.shard_numel()}, on);
  grads_are_views_ = buffer_.defined() && params_.front().scalar_type() == options_.dtype;
  for (size_t i = 0; i < params_.size(); ++i) {
    TRIDENT_CHECK(params_[i].scalar_type() == params_.front().scalar_type(),
                  "data-parallel gradients need parameters of one dtype");
    if (grads_are_views_) params_[i].mutable_grad() = storage_of(i);
  }
  // One process without ZeRO and gradients accumulated in place: nothing to add or reduce.
  unreduced_ = !options_.zero.reduce_scatters() && grads_are_views_ && group_.size() == 1;
  if (unreduced_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i));
    accumulators_.push_back(std::move(accumulator));
  }
  if (options_.fuse_weight_grads && is_16bit_float(params_.front()) && options_.dtype == torch::kFloat)
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].dim() == 2) {
        accumulate_grad_in(params_[i], [this, i] { return storage_of(i); });
        fused_.push_back(params_[i]);
      }
}

DataParallelGrads::~DataParallelGrads() {
  for (const auto& weight : fused_) stop_accumulating_grad_in(weight);
}

torch::Tensor DataParallelGrads::storage_of(size_t param) {
  const size_t b = flat_.bucket_of[param];
  Bucket& bucket = buckets_[b];
  if (!bucket.storage.defined())  // stage 2: allocated when the bucket's first gradient comes
    bucket.storage = torch::zeros({flat_.buckets[b].numel},
                                  params_[param].options().dtype(options_.dtype).requires_grad(false));
  return bucket.storage.narrow(0, flat_.offset[param] - flat_.buckets[b].start, flat_.numel[param])
      .view_as(params_[param]);
}

void DataParallelGrads::zero() {
  if (buffer_.defined()) buffer_.zero_();
  if (shard_.defined()) shard_.zero_();
}

void DataParallelGrads::arm() {
  armed_ = true;
  started_during_backward_ = 0;
  if (!options_.zero.shards_grads())
    for (auto& bucket : buckets_) bucket.ready = 0;
}

void DataParallelGrads::on_ready(size_t param) {
  torch::Tensor& grad = params_[param].mutable_grad();
  if (!grads_are_views_ && grad.defined()) {  // undefined: the multiplies added it all
    storage_of(param).add_(grad);
    grad.reset();
  }
  if (!armed_ && !options_.zero.shards_grads()) return;
  const size_t b = flat_.bucket_of[param];
  Bucket& bucket = buckets_[b];
  if (++bucket.ready == flat_.buckets[b].params.size()) {
    bucket.ready = 0;
    start(b);
    if (armed_) ++started_during_backward_;
  }
}

void DataParallelGrads::start(size_t b) {
  Bucket& bucket = buckets_[b];
  Flight flight{b, bucket.storage, torch::Tensor(), nullptr};
  if (group_.size() == 1) {
    flight.received = flight.sent;  // one rank's bucket is already its reduced (and only) slice
  } else if (!options_.zero.reduce_scatters()) {
    flight.pending = group_.all_reduce_async(flight.sent, ReduceOp::avg);
  } else {
    flight.received = torch::empty({flat_.slice_numel(b)}, flight.sent.options());
    flight.pending = group_.reduce_scatter_async(flight.received, flight.sent, ReduceOp::avg);
  }
  bucket.started = true;
  in_flight_.push_back(std::move(flight));
  if (options_.zero.shards_grads()) {
    bucket.storage = torch::Tensor();  // the next micro-batch fills a fresh one
    if (in_flight_.size() > kMaxInFlight) complete_oldest();
  }
}

void DataParallelGrads::complete_oldest() {
  Flight& flight = in_flight_.front();
  if (flight.pending) flight.pending->wait();
  // Stage 2 adds one micro-batch's share at a time; stage 1 adds into a zeroed shard once.
  if (options_.zero.reduce_scatters()) reduced(flight.bucket).add_(flight.received);
  in_flight_.pop_front();
}

void DataParallelGrads::finish() {
  if (!unreduced_) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const bool unreduced = options_.zero.shards_grads() ? buckets_[b].storage.defined() : !buckets_[b].started;
      if (unreduced) start(b);
    }
    while (!in_flight_.empty()) complete_oldest();
  }
  // Every bucket's reduction has completed: stages 0 and 1 reduced each bucket, stage 2 every
  // transient bucket it filled.
  TRIDENT_CHECK(in_flight_.empty(), in_flight_.size(), " bucket reductions still in flight");
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (options_.zero.shards_grads())
      TRIDENT_CHECK(!buckets_[b].storage.defined(), "stage 2 left bucket ", b, " unreduced");
    else
      TRIDENT_CHECK(unreduced_ || buckets_[b].started, "bucket ", b, " was not reduced");
    buckets_[b].ready = 0, buckets_[b].started = false;
  }
  armed_ = false;
}

torch::Tensor DataParallelGrads::reduced(size_t b) const {
  if (!options_.zero.reduce_scatters()) return buckets_[b].storage;
  return shard_.narrow(0, flat_.buckets[b].shard_start, flat_.slice_numel(b));
}

int64_t DataParallelGrads::bytes() const {
  int64_t elements = (buffer_.defined() ? buffer_.numel() : 0) + (shard_.defined() ? shard_.numel() : 0);
  return elements * int64_t(torch::elementSize(options_.dtype));
}

}  // namespace trident
