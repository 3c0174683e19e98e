#include "model/dropout.h"

#include <ATen/Context.h>

#include <mutex>

#include "core/error.h"
#include "core/hash.h"

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

torch::Tensor RandomStream::fork(const torch::Device& device, const std::function<torch::Tensor()>& draw) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  if (!state_.defined()) {  // the stream's start: the generator seeded with seed_
    std::lock_guard<std::mutex> lock(generator.mutex());
    const torch::Tensor saved = generator.get_state();
    generator.set_current_seed(seed_);
    state_ = generator.get_state();
    generator.set_state(saved);
  }
  torch::Tensor held = state_;
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

void DropoutStreams::reseed(uint64_t seed, int64_t first_layer, int tp_rank, int cp_rank) {
  const uint64_t chunk = splitmix64(splitmix64(seed) ^ uint64_t(first_layer)) ^ splitmix64(uint64_t(cp_rank) + 1);
  replicated.reseed(splitmix64(chunk));
  model_parallel.reseed(splitmix64(chunk ^ splitmix64(uint64_t(tp_rank) + 0x100)));
}

void DropoutStreams::set_states(const std::vector<torch::Tensor>& states) {
  TRIDENT_CHECK(states.size() == 2, "dropout streams take 2 states, got ", states.size());
  replicated.set_state(states[0]);
  model_parallel.set_state(states[1]);
}

torch::Tensor dropout(const torch::Tensor& x, double p, bool training, RandomStream& stream) {
  if (!training || p == 0) return x;
  return stream.fork(x.device(), [&] { return at::dropout(x, p, /*train=*/true); });
}

}  // namespace trident
