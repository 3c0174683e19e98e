// Attention across the context-parallel ranks, as the layout sets it: ring attention
// (parallel/context_parallel.h), Ulysses (parallel/ulysses_attention.h), or both as USP does
// (Fang and Zhao 2024): Ulysses within groups of consecutive ranks, a ring across the groups.
//
// The two levels need no layout of their own. Rank m of c holds chunks m and 2c-1-m of 2c
// (context_parallel.h). With Ulysses groups of u consecutive ranks, the group j of r = c / u
// holds chunks [ju, (j+1)u) and [(2r-1-j)u, (2r-j)u): ring rank j's two chunks of 2r. Ulysses'
// exchange hands each of the group its share of the heads over exactly those, in order, which
// is what ring attention over the r groups takes. c = 4, u = 2 (chunks of 8):
//
//   cp rank        0       1       2       3          ulysses {0,1} {2,3}, rings {0,2} {1,3}
//   chunks       0, 7    1, 6    2, 5    3, 4
//   after Ulysses: ranks 0, 1 hold chunks 0 1 | 6 7 (ring rank 0 of 2: big chunks 0 and 3),
//                  ranks 2, 3 hold chunks 2 3 | 4 5 (ring rank 1: big chunks 1 and 2)
#pragma once

#include <torch/types.h>

#include "parallel/context_parallel.h"
#include "parallel/random_stream.h"
#include "parallel/ulysses_attention.h"

namespace trident {

// Causal attention of this rank's chunks of q [b, heads, s/c, d] and k, v [b, groups, s/c, d]
// over the whole sequence. `attend` is attention over whole sequences (one rank, or within
// Ulysses' groups without a ring); the ring uses `dropout` with `stream` and `documents` (the
// whole sequence's document ids [b, s]) itself. Differentiable; collective over cp's groups.
torch::Tensor context_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const ContextParallel& cp, const LocalAttention& attend, double dropout,
                                RandomStream* stream, const torch::Tensor& documents);

}  // namespace trident
