// Sequence parallelism's gathered inputs, kept as their shard (Korthikanti et al. 2022, as
// Megatron runs it). A column-parallel multiply all-gathers its input along the sequence; its
// backward needs that whole input again for the weight's gradient. Autograd would keep the
// gathered tensor, t times the shard, on every TP rank; here the multiply keeps the shard and
// all-gathers it again when its backward asks for it (one all-gather more per backward, the
// layer's memory as the formula counts it).
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace trident {

// `products`: 2-D multiplies (at::addmm or at::mm) of the same rows, the rows of `shard`
// ([b, s/t, h]) gathered over `tp`, each with a weight that wants its gradient. Each drops the
// gathered rows it saved; backward gathers them again once for all of them, where it computes
// the weights' gradients (a split backward's W, not its I). `shard` must not change in place
// until then (checked). Products without a graph (no gradient wanted) are left as they are.
void gather_again_in_backward(const std::vector<torch::Tensor>& products, const torch::Tensor& shard,
                              std::shared_ptr<Communicator> tp);

}  // namespace trident
