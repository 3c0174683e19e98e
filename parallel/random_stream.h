// A random stream of its own on any device, for dropout that must draw the same masks again
// (recomputation, ring attention's backward) or differently on each rank (model/dropout.h).
// It borrows the device's default generator while it draws (set to the stream's state, put
// back after), so any kernel's randomness, fused attention's too, follows it. Not for several
// threads at once.
#pragma once

#include <torch/types.h>

#include <functional>

namespace trident {

class RandomStream {
 public:
  explicit RandomStream(uint64_t seed = 0) : seed_(seed) {}
  void reseed(uint64_t seed);
  // Runs `draw` with the default generator of `device` in this stream's state.
  torch::Tensor fork(const torch::Device& device, const std::function<torch::Tensor()>& draw);
  // Undefined before the first draw (the next draw then starts from the seed).
  const torch::Tensor& state() const { return state_; }
  void set_state(torch::Tensor state) { state_ = std::move(state); }
  // The state, started from the seed on `device`'s generator if the stream has not drawn yet.
  const torch::Tensor& started_state(const torch::Device& device);

 private:
  uint64_t seed_;
  torch::Tensor state_;
};

}  // namespace trident
