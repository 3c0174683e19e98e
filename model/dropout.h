// Dropout that draws from the right random stream, as Megatron's model-parallel RNG tracker
// does. Two streams per model chunk:
//   replicated      the same on every TP rank: for activations that are whole on each of them
//                   (the embeddings' and blocks' outputs without sequence parallelism), so the
//                   copies stay equal;
//   model_parallel  different on every TP rank: for what TP splits (attention probabilities of
//                   this rank's heads; activations split along the sequence with SP).
// Both differ per context-parallel rank (other tokens) and per chunk (other layers), and start
// afresh every iteration: a mask is a function of (seed, iteration, chunk, tp, cp rank), so a
// resumed run draws the masks the straight run drew without saving any random state. Each is
// a RandomStream (parallel/random_stream.h); recomputation saves and restores their states
// within an iteration (model/recompute.h).
#pragma once

#include <torch/types.h>

#include <vector>

#include "parallel/random_stream.h"

namespace trident {

struct DropoutStreams {
  RandomStream replicated, model_parallel;
  // Seeds both from (seed, iteration, the chunk's first slot (Stage::first_slot), cp rank),
  // model_parallel also from the tp rank.
  void reseed(uint64_t seed, int64_t iteration, int64_t first_slot, int tp_rank, int cp_rank);
  std::vector<torch::Tensor> states() const { return {replicated.state(), model_parallel.state()}; }
  void set_states(const std::vector<torch::Tensor>& states);
};

// Dropout of `x` with probability p (identity when p is 0 or not training), drawn from `stream`.
torch::Tensor dropout(const torch::Tensor& x, double p, bool training, RandomStream& stream);

}  // namespace trident
