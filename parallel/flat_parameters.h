// The model's weights in the flat layout of FlatBuckets: every parameter tensor becomes a view
// of its place in a bucket (set_data), so the model keeps its tensors while a bucket of weights
// is one contiguous range (one all-gather). What the weights hold is copied in, so they must be
// final (initialised or loaded) first. The optimizer updates this rank's slice of each bucket
// and publishes it.
#pragma once

#include <torch/types.h>

#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/flat_buckets.h"

namespace trident {

class FlatParameters {
 public:
  virtual ~FlatParameters() = default;
  // This rank's slice of bucket b (the whole bucket when unsharded), which the optimizer updates.
  virtual torch::Tensor slice(size_t bucket) const = 0;
  // Makes every rank's parameters follow the updated slices. Collective over the group.
  virtual void publish() = 0;
  // Bytes of weights held between iterations.
  virtual int64_t bytes() const = 0;
  virtual torch::TensorOptions options() const = 0;
};

// ZeRO stages 0-2: every weight on every rank, in one buffer.
class ReplicatedParameters : public FlatParameters {
 public:
  // `params` in model order, of one dtype and device, as `flat` places them (sharded over
  // `dp_group` or not at all).
  ReplicatedParameters(const std::vector<torch::Tensor>& params, const FlatBuckets& flat, Communicator& dp_group);
  ReplicatedParameters(const ReplicatedParameters&) = delete;
  ReplicatedParameters& operator=(const ReplicatedParameters&) = delete;

  torch::Tensor slice(size_t bucket) const override;
  // All-gathers each bucket from its slices when sharded.
  void publish() override;
  int64_t bytes() const override;
  torch::TensorOptions options() const override { return buffer_.options(); }

 private:
  Communicator& group_;
  FlatBuckets flat_;
  int64_t rank_;          // whose slices this rank updates (0 when unsharded)
  torch::Tensor buffer_;  // every weight, with the buckets' padding
};

// Copies the parameter's values into `place` (as many elements, contiguous) and makes the
// parameter a view of it.
void place_parameter(const torch::Tensor& param, const torch::Tensor& place);

}  // namespace trident
