// Data-parallel gradients in one flat buffer (parallel/flat_buckets.h), reduced over the
// data-parallel group bucket by bucket as soon as a bucket's gradients are final, while
// backward goes on.
//
// Gradients accumulate in `dtype`: the parameters' own (their .grad is then a view of the
// buffer, and AccumulateGrad adds into it in place) or fp32 for 16-bit parameters: the linear
// layers' multiplies add their weights' gradients into the buffer themselves (gradient-
// accumulation fusion, parallel/linear_multiply.h), and a hook adds every other micro-batch
// .grad into the buffer and frees it. ZeRO stages:
//   0  every bucket is all-reduced (averaged): every rank holds every mean gradient;
//   1  the buffer is kept whole, each bucket reduce-scattered: rank r keeps the mean of its slice;
//   2  (and 3) only the shard is kept: a bucket's storage lives while a micro-batch's backward fills
//      it and is reduce-scattered and freed right after, every micro-batch (as DeepSpeed does;
//      M reduce-scatters per iteration instead of one, for 1/d of the gradient memory).
// One rank has nothing to reduce: its buckets are their own means, and no collective runs.
#pragma once

#include <torch/csrc/autograd/variable.h>
#include <torch/types.h>

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "core/layout.h"
#include "parallel/comm/communicator.h"
#include "parallel/flat_buckets.h"

namespace torch::autograd {
struct Node;
}

namespace trident {

struct GradBufferOptions {
  torch::Dtype dtype = torch::kFloat;  // accumulation dtype
  ZeroSharding zero;                   // replicas: the data-parallel group's size, at every stage
  // 16-bit parameters into an fp32 buffer: their weights' gradients added by the multiplies
  // (false: every gradient through .grad and the hook).
  bool fuse_weight_grads = true;
};

// Buckets of about `bucket_bytes` of gradients in `dtype` for `params` (model order), padded for
// `zero`'s shards, each of one of `groups` (make_flat_buckets).
FlatBuckets make_grad_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes,
                              torch::Dtype dtype, const ZeroSharding& zero,
                              const std::vector<int64_t>& groups = {});

class DataParallelGrads {
 public:
  // Points every parameter's .grad into the gradient buffer laid out by `flat` (or, for 16-bit
  // parameters accumulating in fp32, adds and frees them there) and hooks each parameter's
  // AccumulateGrad, which holds `this`: not copyable or movable.
  DataParallelGrads(std::vector<torch::Tensor> params, FlatBuckets flat, Communicator& dp_group,
                    GradBufferOptions options);
  ~DataParallelGrads();
  DataParallelGrads(const DataParallelGrads&) = delete;
  DataParallelGrads& operator=(const DataParallelGrads&) = delete;

  // Zeroes the gradients; use instead of optimizer.zero_grad(), which could drop the views.
  void zero();
  // The next backward is the last of the iteration: start each bucket's reduction as soon as
  // its gradients are final (stage 2 reduces after every backward and needs no arming).
  void arm();
  // Reduces what has not been reduced, waits for all, and disarms. Afterwards reduced(b) holds
  // this rank's mean gradients of bucket b.
  void finish();

  const FlatBuckets& flat() const { return flat_; }
  // This rank's reduced slice of bucket b (the whole bucket at stage 0).
  torch::Tensor reduced(size_t bucket) const;
  size_t num_buckets() const { return buckets_.size(); }
  // Buckets whose reduction began inside the last backward (overlap), for tests and logs.
  size_t started_during_backward() const { return started_during_backward_; }
  // Bytes of gradient storage held between iterations.
  int64_t bytes() const;

 private:
  struct Bucket {
    torch::Tensor storage;  // the bucket's gradients (a view of buffer_ unless transient)
    size_t ready = 0;       // gradients final so far
    bool started = false;   // reduction started this iteration
  };
  struct Flight {  // a reduction in progress
    size_t bucket;
    torch::Tensor sent, received;
    std::unique_ptr<PendingCollective> pending;
  };
  class ReadyHook;
  void on_ready(size_t param);
  // A parameter's place in its bucket's storage, in the parameter's shape (at stage 2 the
  // storage is made when its first gradient comes).
  torch::Tensor storage_of(size_t param);
  void start(size_t bucket);
  void complete_oldest();

  Communicator& group_;
  GradBufferOptions options_;
  FlatBuckets flat_;
  std::vector<torch::Tensor> params_;
  bool grads_are_views_;   // .grad is a view of buffer_; otherwise hooks add and free it
  bool unreduced_;         // gradients need no reduction and no hooks
  torch::Tensor buffer_;   // every gradient (stages 0 and 1)
  torch::Tensor shard_;    // this rank's reduced slices (stages 1 and 2)
  std::vector<Bucket> buckets_;
  std::deque<Flight> in_flight_;
  // Keep the hooks alive; held as this LibTorch holds autograd nodes (std::shared_ptr in 1.x,
  // c10::intrusive_ptr in recent 2.x).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()))> accumulators_;
  std::vector<torch::Tensor> fused_;  // weights whose multiplies add their gradients into the buffer
  bool armed_ = false;
  size_t started_during_backward_ = 0;
};

}  // namespace trident
