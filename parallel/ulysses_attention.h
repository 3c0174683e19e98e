// Ulysses context parallelism (DeepSpeed-Ulysses, Jacobs et al. 2023): around attention, one
// all-to-all trades each rank's tokens of every head for every token of its share of the heads;
// attention then runs on whole sequences, locally, and a second all-to-all trades back. Four
// all-to-alls forward (q, k, v, the output) and four backward, each moving (c - 1) / c of the
// tensor, against ring attention's c - 1 exchanges of keys and values (parallel/context_parallel.h).
//
// Rank r holds the load-balanced chunks r and 2c - 1 - r of each sequence (context_parallel.h's
// layout, which the rest of the model keeps). With c = 2, heads h0..h3 and chunks 0..3:
//
//   before:  rank 0: h0-h3 of chunks 0, 3      rank 1: h0-h3 of chunks 1, 2
//   part j of each rank goes to rank j (heads 2j, 2j+1):
//   after:   rank 0: h0, h1 of chunks 0, 1, 2, 3 (whole sequences, in order)
//            rank 1: h2, h3 of chunks 0, 1, 2, 3
//
// Grouped-query attention: the key/value groups are dealt out with their query heads; when
// they are fewer than the ranks (or do not divide among them), each is repeated just enough
// that they do (their gradients summed back by autograd).
#pragma once

#include <torch/types.h>

#include <functional>

#include "parallel/context_parallel.h"

namespace trident {

// Attention over whole sequences: queries [b, heads, s, d], keys and values [b, groups, s, d].
// (Under USP what `cp.group` gathers is its ring rank's two chunks, in order, not the whole:
// parallel/context_attention.h.)
using LocalAttention =
    std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)>;

// This rank's chunks of the attention output [b, heads, s/c, d] from its chunks of q
// [b, heads, s/c, d] and of k, v [b, groups, s/c, d], `attend` computing this rank's share of
// the heads over whole sequences. heads must be a multiple of cp.size() (core/layout.cpp checks
// it). Differentiable; collective over `cp.group`, which must outlive the backward pass.
torch::Tensor ulysses_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const ContextParallel& cp, const LocalAttention& attend);

}  // namespace trident
