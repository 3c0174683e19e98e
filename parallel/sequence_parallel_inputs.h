// Sequence parallelism's gathered inputs, kept as their shard (Korthikanti et al. 2022, as
// Megatron runs it). A column-parallel multiply all-gathers its input along the sequence; its
// backward needs that whole input again for the weight's gradient. Autograd would keep the
// gathered tensor, t times the shard, on every TP rank; here the multiplies keep the shard and
// all-gather it again in backward (one all-gather more per backward, the layer's memory as the
// formula counts it).
#pragma once

#include <torch/types.h>

#include <vector>

#include "parallel/comm/communicator.h"

namespace trident {

// The column-parallel multiplies of one input: `shard` ([b, s/t, h]) all-gathered over `tp` into
// the rows of [b, s, h], and each weight's product rows W_i^T + b_i in [b, s, out_i] (`biases`:
// one per weight, or none). Backward, in one autograd node:
//   the input's gradient, the sum of g_i W_i, reduce-scattered back to the shard's rows;
//   the weights' gradients from the shard gathered again, once for all of them, and only where
//   they are asked for (a split backward's W, not its I), each added into its gradient buffer
//   where one is registered (parallel/linear_multiply.h).
// `shard` must not change in place until that backward (checked).
std::vector<torch::Tensor> multiply_gathered_shard(const torch::Tensor& shard,
                                                   const std::vector<torch::Tensor>& weights,
                                                   const std::vector<torch::Tensor>& biases, Communicator& tp);

}  // namespace trident
