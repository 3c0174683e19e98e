#include "model/dropout.h"

#include "core/error.h"
#include "core/hash.h"

namespace trident {

void DropoutStreams::reseed(uint64_t seed, int64_t iteration, int64_t first_slot, int tp_rank, int cp_rank) {
  const uint64_t step = splitmix64(splitmix64(seed) ^ uint64_t(iteration));
  const uint64_t chunk = splitmix64(step ^ uint64_t(first_slot)) ^ splitmix64(uint64_t(cp_rank) + 1);
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
