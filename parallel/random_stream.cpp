#include "parallel/random_stream.h"

#include <ATen/Context.h>

#include <mutex>

namespace trident {
namespace {

// Swaps the generator's state with `state` (the generator's own mutex held only for the swap:
// the kernels take it themselves while they draw).
void swap_state(at::Generator& generator, torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  torch::Tensor previous = generator.get_state();
  generator.set_state(state);
  state = previous;
}

}  // namespace

void RandomStream::reseed(uint64_t seed) {
  seed_ = seed;
  state_ = torch::Tensor();
}

const torch::Tensor& RandomStream::started_state(const torch::Device& device) {
  if (!state_.defined()) {
    at::Generator generator = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    const torch::Tensor saved = generator.get_state();
    generator.set_current_seed(seed_);
    state_ = generator.get_state();
    generator.set_state(saved);
  }
  return state_;
}

torch::Tensor RandomStream::fork(const torch::Device& device, const std::function<torch::Tensor()>& draw) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  torch::Tensor held = started_state(device);
  swap_state(generator, held);  // the generator runs the stream; `held` keeps its own state
  torch::Tensor result;
  try {
    result = draw();
  } catch (...) {
    swap_state(generator, held);
    throw;
  }
  swap_state(generator, held);  // `held` is the stream's state after the draw
  state_ = held;
  return result;
}

}  // namespace trident
