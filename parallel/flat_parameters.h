// The model's weights moved into one flat buffer laid out by FlatBuckets: every parameter
// tensor becomes a view of its place in the buffer (set_data), so the model keeps its tensors
// while a bucket of weights is one contiguous range (one all-gather under ZeRO). What the
// weights hold is copied in, so they must be final (initialised or loaded) first.
#pragma once

#include <torch/types.h>

#include <vector>

#include "parallel/flat_buckets.h"

namespace trident {

class FlatParameters {
 public:
  // `params` in model order, of one dtype and device, as `flat` places them.
  FlatParameters(const std::vector<torch::Tensor>& params, const FlatBuckets& flat);
  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  // Every weight (with the buckets' padding); the parameters are views of it.
  const torch::Tensor& buffer() const { return buffer_; }

 private:
  torch::Tensor buffer_;
};

}  // namespace trident
