// Expert parallelism (GShard, Lepikhin et al. 2020; Megatron-Core's all-to-all token
// dispatcher): the experts of a Mixture-of-Experts layer are dealt out to the ranks of the
// expert-parallel group, E / ep consecutive ones each, and every token assignment travels to the
// rank holding its expert and back.
//
// A rank's assignments arrive sorted by global expert, so the runs for one rank's experts are
// contiguous and one all-to-all sends them (the counts per expert exchanged first: one host
// synchronisation). What arrives is grouped by source rank, then by expert; the experts want
// their rows together, so a permutation regroups them, and its inverse undoes it before the
// all-to-all back (ep 2, two experts a rank; rank 0's view; "1:e2" = rows from rank 1 for e2):
//
//   sent      [e0 e1 | e2 e3]                 (runs of this rank's assignments by expert)
//               to 0    to 1
//   received  [0:e0 0:e1 | 1:e0 1:e1]        (from rank 0 | from rank 1)
//   by expert [0:e0 1:e0 | 0:e1 1:e1]        -> expert 0's rows, expert 1's rows
//
// With a group of one rank every step is the identity.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace trident {

// A layer's expert-parallel group.
struct ExpertParallel {
  std::shared_ptr<Communicator> group = make_self_communicator();
};

class ExpertDispatch {
 public:
  // `counts` [E]: this rank's assignments to each global expert (on the group's device).
  // Collective over `group`: exchanges the counts and brings them to the host.
  ExpertDispatch(const torch::Tensor& counts, Communicator& group);

  // This rank's assignments [n, h], sorted by global expert -> the rows of this rank's experts
  // from every rank [m, h], grouped by local expert (local_counts()). Differentiable.
  torch::Tensor dispatch(const torch::Tensor& runs) const;
  // The inverse: the local experts' outputs [m, h] in dispatch()'s order -> this rank's
  // assignments' outputs [n, h] in the order it sent them. Differentiable.
  torch::Tensor combine(const torch::Tensor& outputs) const;
  // Rows each of this rank's experts takes, in order.
  const std::vector<int64_t>& local_counts() const { return local_counts_; }
  // Rows this rank sends (its assignments, summed over the experts).
  int64_t sent_rows() const { return sent_total_; }

 private:
  Communicator& group_;
  std::vector<int64_t> sent_, received_;  // rows to and from each rank
  std::vector<int64_t> local_counts_;
  int64_t sent_total_ = 0;
  torch::Tensor by_expert_, by_source_;   // the regrouping permutation and its inverse (ep > 1)
};

}  // namespace trident
