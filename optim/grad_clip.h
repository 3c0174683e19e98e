// Global gradient norm and clipping.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace trident {

// Sum of squares of every gradient, in fp64: a scalar tensor on the gradients' device. Parallel
// layouts reduce it across their groups before the square root, counting each shared parameter
// once.
torch::Tensor grad_square_sum(const std::vector<torch::Tensor>& params);

// Scales all gradients by max_norm / norm when norm exceeds max_norm (max_norm 0: never).
// Returns the norm before clipping.
double clip_grads(const std::vector<torch::Tensor>& params, double norm, double max_norm);

}  // namespace trident
