// Context parallelism: each sequence is split over the ranks of a context-parallel group, and
// attention, the only operation that mixes tokens, becomes ring attention. Everything else in
// the model acts per token.
//
// Load balance for the causal mask: the sequence is cut into 2c chunks and rank i holds chunks
// i and 2c-1-i (as Megatron and torchtitan do), one early and one late, so that every rank
// has the same attention work:
//
//   s tokens, c = 2:   | chunk 0 | chunk 1 | chunk 2 | chunk 3 |
//                        rank 0    rank 1    rank 1    rank 0      rank 0: [0, s/4) + [3s/4, s)
//
// Ring attention (ring_attention): the key/value blocks of the c ranks travel around the
// group, c - 1 exchanges, each started before the block in hand is computed (Gloo's transfers
// progress in its own threads meanwhile; Open MPI's mostly inside MPI calls, i.e. at wait();
// NCCL's on its own stream, behind the block's computation). A query chunk q and a key chunk k
// (global chunk indices) give a block that is
//   k < q: fully visible      k == q: causal (the diagonal)      k > q: fully masked, skipped
// and the blocks' partial outputs merge by the log-sum-exp rule (online softmax):
//   lse = log(exp(lse_1) + exp(lse_2)),  out = out_1 exp(lse_1 - lse) + out_2 exp(lse_2 - lse).
// Backward is a ring too: keys and values travel again with their gradients (dK, dV), which
// reach their owner after c exchanges.
#pragma once

#include <torch/types.h>

#include <memory>

#include "parallel/comm/communicator.h"
#include "parallel/random_stream.h"

namespace trident {

// The context-parallel ranks of a model: `group` (whose chunks of each sequence this rank holds)
// and how attention crosses them (parallel/context_attention.h): Ulysses within `ulysses`, ring
// attention within `ring`, each all of `group` or one rank when the other level is all of it.
// ring_attention and ulysses_attention cross `group` alone.
struct ContextParallel {
  std::shared_ptr<Communicator> group = make_self_communicator();
  std::shared_ptr<Communicator> ulysses = make_self_communicator();
  std::shared_ptr<Communicator> ring = make_self_communicator();
  int rank() const { return group->rank(); }
  int size() const { return group->size(); }
};

// Keys or values [b, groups, n, d] repeated for the `per_group` consecutive query heads that
// share each (grouped-query attention): [b, groups * per_group, n, d].
torch::Tensor repeat_for_query_heads(const torch::Tensor& t, int64_t per_group);

// This rank's two chunks of `x` along `dim` (length divisible by 2 * size), concatenated.
torch::Tensor context_parallel_slice(const torch::Tensor& x, int64_t dim, int rank, int size);
// The global positions of those tokens: [rank's chunk, chunk 2 * size - 1 - rank].
torch::Tensor context_parallel_positions(int64_t seq_length, int rank, int size, torch::TensorOptions options);

// Causal attention of this rank's queries [b, heads, s/c, d] over the whole sequence's keys and
// values [b, groups, s/c, d] (grouped-query attention when groups < heads: each group serves
// heads / groups consecutive query heads, and travels the ring once, not once per head), each
// rank holding its two chunks of q, k and v. Differentiable; collective over
// `cp.group` (which must outlive the backward pass). 16-bit inputs are computed in fp32.
// `dropout` > 0 drops attention probabilities with masks drawn block by block from `stream`;
// backward draws them again from the stream's state at the start of forward. `documents`, the
// whole sequence's document ids [b, s] (every rank holds them), keeps attention within each
// document: the pairs of tokens in different documents are masked block by block (a query
// that sees no key of a block adds nothing from it).
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const ContextParallel& cp, double dropout = 0, RandomStream* stream = nullptr,
                             const torch::Tensor& documents = {});

}  // namespace trident
