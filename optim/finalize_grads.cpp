#include "optim/finalize_grads.h"

#include <algorithm>

#include "core/error.h"

#include "optim/parameter_groups.h"
#include "parallel/comm/process_groups.h"

namespace trident {
namespace {

// Sums over `group` this rank's reduced gradients of the parameters whose role `which` picks,
// in one all-reduce. Every member holds the same pieces (same roles at the same places), so all
// skip or all take part.
template <typename Which>
void all_reduce_grads(ParameterGroups& optimizer, Which which, Communicator& group) {
  if (group.size() == 1) return;
  std::vector<torch::Tensor> pieces;
  for (auto& g : optimizer.groups()) {
    std::vector<bool> picked;
    for (const auto& p : g.params) picked.push_back(which(p.role));
    for (auto& piece : g.optimizer->grad_pieces(picked)) pieces.push_back(piece);
  }
  if (pieces.empty()) return;
  auto flat = torch::cat(pieces);
  group.all_reduce(flat, ReduceOp::sum);
  int64_t offset = 0;
  for (auto& piece : pieces) {
    piece.copy_(flat.narrow(0, offset, piece.numel()));
    offset += piece.numel();
  }
}

// A V (ZB-V, DualPipe-V) holds both ends of the pipeline on its first stage: the tied embedding's owner and copy
// are summed there, each in a bucket of its own (parallel/flat_buckets.h), so their pieces line up.
void sum_tied_held_together(ParameterGroups& optimizer) {
  for (auto& g : optimizer.groups()) {
    std::vector<bool> owner, copy;
    for (const auto& p : g.params) {
      owner.push_back(p.role.tied == Tied::owner);
      copy.push_back(p.role.tied == Tied::copy);
    }
    const bool both = std::count(owner.begin(), owner.end(), true) > 0 && std::count(copy.begin(), copy.end(), true) > 0;
    if (!both) continue;
    auto owners = g.optimizer->grad_pieces(owner), copies = g.optimizer->grad_pieces(copy);
    TRIDENT_CHECK(owners.size() == copies.size(), owners.size(), " pieces of the tied embedding and ", copies.size(),
                  " of its copy");
    for (size_t i = 0; i < owners.size(); ++i) {
      TRIDENT_CHECK(owners[i].numel() == copies[i].numel(), "the tied embedding's piece ", i, " and its copy's differ");
      owners[i].add_(copies[i]);
      copies[i].copy_(owners[i]);
    }
  }
}

}  // namespace

torch::Tensor finalize_grads(ParameterGroups& optimizer, const ProcessGroups& groups) {
  optimizer.finish_grads();
  all_reduce_grads(optimizer, [](const ParameterRole& r) { return r.partial_over_tp; }, groups.tp_group());
  all_reduce_grads(optimizer, [](const ParameterRole& r) { return r.tied != Tied::no; }, groups.embedding_group());
  sum_tied_held_together(optimizer);
  // Each rank counts what no other rank counts, and the sum runs over the model-parallel group
  // when every replica holds the same (and so counts the same). Otherwise, when ZeRO shards a
  // group or the experts are split over ranks outside the model-parallel group, it runs over the
  // world, and a group's copies count on its first replica only unless it is sharded.
  const int tp = groups.coordinates().tp;
  const bool over_world = optimizer.sharded() || groups.ep_group().size() > 1;
  torch::Tensor total;
  for (const auto& g : optimizer.groups()) {
    const bool copies_count = !over_world || g.optimizer->sharded() || g.replicas->rank() == 0;
    std::vector<bool> counted;
    for (const auto& p : g.params) counted.push_back(copies_count && p.role.counted_in_norm(tp));
    const torch::Tensor squares = g.optimizer->grad_square_sum(counted).reshape({1});
    total = total.defined() ? total + squares : squares.contiguous();
  }
  (over_world ? groups.world() : groups.mp_group()).all_reduce(total, ReduceOp::sum);
  return total.reshape({}).sqrt();
}

}  // namespace trident
