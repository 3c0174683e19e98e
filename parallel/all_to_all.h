// The all-to-all as autograd sees it: rows sent to each rank of a group and rows received from
// each, whose gradient is the same exchange in reverse (what went to rank i comes back from it).
// Ulysses' head-for-token trades (parallel/ulysses_attention.h) and expert parallelism's token
// dispatch (parallel/expert_parallel.h) are built on it.
#pragma once

#include <torch/types.h>

#include <vector>

#include "parallel/comm/communicator.h"

namespace trident {

// `rows` [n, ...] cut along the first dimension in rank order, sent_rows[i] rows to rank i; the
// result holds received_rows[i] rows from rank i, in rank order. Empty splits: size() equal
// parts each way. Every rank's received_rows[i] must be rank i's sent_rows[this rank]
// (Communicator::all_to_all). Differentiable: the gradient goes back with the splits swapped.
torch::Tensor exchange_rows(const torch::Tensor& rows, Communicator& group,
                            const std::vector<int64_t>& received_rows = {}, const std::vector<int64_t>& sent_rows = {});

}  // namespace trident
