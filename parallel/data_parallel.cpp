#include "parallel/data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"

namespace trident {

// Runs after AccumulateGrad has added a micro-batch's gradient into .grad.
class DataParallelGrads::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(DataParallelGrads* owner, size_t bucket) : owner_(owner), bucket_(bucket) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    owner_->on_ready(bucket_);
    return outputs;
  }

 private:
  DataParallelGrads* owner_;
  size_t bucket_;
};

DataParallelGrads::DataParallelGrads(std::vector<torch::Tensor> params, Communicator& data_parallel,
                                     int64_t bucket_bytes)
    : group_(data_parallel) {
  if (params.empty()) fail("data parallelism needs at least one parameter");
  std::reverse(params.begin(), params.end());
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  buffer_ = torch::zeros({total}, params.front().options().requires_grad(false));
  const int64_t bucket_elements =
      std::max<int64_t>(1, bucket_bytes / int64_t(params.front().element_size()));

  int64_t offset = 0, bucket_start = 0;
  std::vector<size_t> bucket_of(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    p.mutable_grad() = buffer_.narrow(0, offset, p.numel()).view_as(p);
    offset += p.numel();
    if (buckets_.empty() || buckets_.back().view.defined()) buckets_.emplace_back();
    buckets_.back().num_params++;
    bucket_of[i] = buckets_.size() - 1;
    if (offset - bucket_start >= bucket_elements || i + 1 == params.size()) {
      buckets_.back().view = buffer_.narrow(0, bucket_start, offset - bucket_start);
      bucket_start = offset;
    }
  }
  if (group_.size() == 1) return;  // nothing to reduce: no hooks
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    accumulator->add_post_hook(std::make_unique<ReadyHook>(this, bucket_of[i]));
    accumulators_.push_back(std::move(accumulator));
  }
}

DataParallelGrads::~DataParallelGrads() = default;

void DataParallelGrads::zero() { buffer_.zero_(); }

void DataParallelGrads::arm() {
  armed_ = true;
  started_during_backward_ = 0;
  for (auto& bucket : buckets_) bucket.ready = 0;
}

void DataParallelGrads::on_ready(size_t index) {
  if (!armed_) return;
  Bucket& bucket = buckets_[index];
  if (++bucket.ready == bucket.num_params) {
    start(bucket);
    ++started_during_backward_;
  }
}

void DataParallelGrads::start(Bucket& bucket) {
  bucket.pending = group_.all_reduce_async(bucket.view, ReduceOp::avg);
}

void DataParallelGrads::finish() {
  if (group_.size() > 1) {
    for (auto& bucket : buckets_)
      if (!bucket.pending) start(bucket);
    for (auto& bucket : buckets_) {
      bucket.pending->wait();
      bucket.pending.reset();
    }
  }
  armed_ = false;
}

}  // namespace trident
