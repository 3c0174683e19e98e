#include "optim/finalize_grads.h"

#include "optim/zero.h"
#include "parallel/comm/process_groups.h"

namespace trident {
namespace {

// Sums over `group` this rank's reduced gradients of the parameters whose role `which` picks,
// in one all-reduce. Every member holds the same pieces (same roles at the same places), so all
// skip or all take part.
template <typename Which>
void all_reduce_grads(ZeroOptimizer& optimizer, const std::vector<ParameterRole>& roles, Which which,
                      Communicator& group) {
  if (group.size() == 1) return;
  std::vector<bool> picked;
  for (const auto& role : roles) picked.push_back(which(role));
  std::vector<torch::Tensor> pieces = optimizer.grad_pieces(picked);
  if (pieces.empty()) return;
  auto flat = torch::cat(pieces);
  group.all_reduce(flat, ReduceOp::sum);
  int64_t offset = 0;
  for (auto& piece : pieces) {
    piece.copy_(flat.narrow(0, offset, piece.numel()));
    offset += piece.numel();
  }
}

}  // namespace

torch::Tensor finalize_grads(ZeroOptimizer& optimizer, const ProcessGroups& groups,
                             const std::vector<ParameterRole>& roles) {
  optimizer.grads().finish();
  all_reduce_grads(optimizer, roles, [](const ParameterRole& r) { return r.sequence_parallel; },
                   groups.tp_group());
  all_reduce_grads(optimizer, roles, [](const ParameterRole& r) { return r.tied != Tied::no; },
                   groups.embedding_group());
  // Each rank counts what no other rank counts; the sum runs over the model-parallel group, and
  // over the data-parallel ranks too when their shards differ (ZeRO).
  const int tp = groups.coordinates().tp;
  std::vector<bool> counted;
  for (const auto& role : roles) counted.push_back(role.counted_in_norm(tp));
  auto total = optimizer.grad_square_sum(counted).reshape({1}).contiguous();
  (optimizer.sharded() ? groups.world() : groups.mp_group()).all_reduce(total, ReduceOp::sum);
  return total.reshape({}).sqrt();
}

}  // namespace trident
