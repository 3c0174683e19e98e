// Data-parallel gradients: one flat buffer per model replica, cut into buckets in reverse
// parameter order (the order backward produces gradients), each bucket all-reduced (averaged)
// over the data-parallel group as soon as its last gradient is final, while backward goes on.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "parallel/comm.h"

namespace torch::autograd {
struct Node;
}

namespace trident {

class DataParallelGrads {
 public:
  // Makes every parameter's .grad a view of the flat buffer (so accumulation over
  // micro-batches adds into it in place) and installs one post-accumulation hook per parameter.
  DataParallelGrads(std::vector<torch::Tensor> params, Communicator& data_parallel,
                    int64_t bucket_bytes);
  ~DataParallelGrads();

  // Zeroes the buffer; use instead of optimizer.zero_grad(), which could drop the views.
  void zero();
  // The next backward is the last of the iteration: start each bucket's all-reduce as soon
  // as its gradients are final.
  void arm();
  // Starts the buckets that have not started (parameters that got no gradient), waits for
  // all, and disarms. Afterwards every gradient is the mean over the data-parallel group.
  void finish();

  size_t num_buckets() const { return buckets_.size(); }
  // Buckets whose all-reduce began inside the last backward (overlap), for tests and logs.
  size_t started_during_backward() const { return started_during_backward_; }
  const torch::Tensor& buffer() const { return buffer_; }

 private:
  struct Bucket {
    torch::Tensor view;         // contiguous slice of buffer_
    size_t num_params = 0;
    size_t ready = 0;
    std::unique_ptr<PendingCollective> pending;
  };
  class ReadyHook;
  void on_ready(size_t bucket);
  void start(Bucket& bucket);

  Communicator& group_;
  torch::Tensor buffer_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks alive
  bool armed_ = false;
  size_t started_during_backward_ = 0;
};

}  // namespace trident
