#include "parallel/ulysses_attention.h"

#include <numeric>

#include "core/error.h"
#include "parallel/all_to_all.h"

namespace trident {
namespace {

// This rank's chunks of every head [b, heads, s/c, d] -> whole sequences of its share of the
// heads [b, heads/c, s, d]. Received part i holds rank i's chunks i and 2c-1-i: the first halves
// in rank order are chunks 0..c-1, the second halves in reverse rank order chunks c..2c-1.
// (Under USP the group's ranks hold chunks of a longer sequence, and these are its ring rank's
// two, in order: parallel/context_attention.h.)
torch::Tensor whole_sequences_of_my_heads(const torch::Tensor& x, Communicator& group) {
  const int64_t c = group.size(), b = x.size(0), heads = x.size(1), n = x.size(2), d = x.size(3);
  const torch::Tensor parts = x.reshape({b, c, heads / c, n, d}).transpose(0, 1);  // part j: rank j's heads
  const torch::Tensor held = exchange_rows(parts, group).view({c, b, heads / c, 2, n / 2, d});
  const torch::Tensor chunks = torch::cat({held.select(3, 0), held.select(3, 1).flip(0)}, 0);  // [2c, b, h/c, n/2, d]
  return chunks.permute({1, 2, 0, 3, 4}).reshape({b, heads / c, c * n, d});
}

// The inverse: whole sequences of this rank's heads [b, heads/c, s, d] -> its chunks of every
// head [b, heads, s/c, d]. Part j, for rank j, holds chunks j and 2c-1-j.
torch::Tensor my_chunks_of_every_head(const torch::Tensor& x, Communicator& group) {
  const int64_t c = group.size(), b = x.size(0), my_heads = x.size(1), s = x.size(2), d = x.size(3);
  const torch::Tensor chunks = x.reshape({b, my_heads, 2 * c, s / (2 * c), d}).permute({2, 0, 1, 3, 4});
  const torch::Tensor parts =
      torch::stack({chunks.narrow(0, 0, c), chunks.narrow(0, c, c).flip(0)}, 3).reshape({c, b, my_heads, s / c, d});
  const torch::Tensor held = exchange_rows(parts, group);  // part i: rank i's heads, my chunks
  return held.transpose(0, 1).reshape({b, c * my_heads, s / c, d});
}

}  // namespace

torch::Tensor ulysses_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const ContextParallel& cp, const LocalAttention& attend) {
  Communicator& group = *cp.group;
  const int64_t c = cp.size(), heads = q.size(1), groups = k.size(1);
  TRIDENT_CHECK(heads % c == 0 && heads % groups == 0 && q.size(2) % 2 == 0, "Ulysses: ", heads, " heads and ",
                groups, " key/value groups of ", q.size(2), " tokens over ", c, " ranks");
  // Each group repeated until the groups deal out evenly: lcm(groups, c) of them, which divides
  // heads (a multiple of both), so every rank's groups still serve whole runs of its heads.
  const int64_t repeats = c / std::gcd(groups, c);
  auto dealt = [&](const torch::Tensor& t) {
    return whole_sequences_of_my_heads(repeat_for_query_heads(t, repeats), group);
  };
  return my_chunks_of_every_head(attend(whole_sequences_of_my_heads(q, group), dealt(k), dealt(v)), group);
}

}  // namespace trident
