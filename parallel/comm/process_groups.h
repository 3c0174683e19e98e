// The groups of the Megatron process grid (Layout::grid(): tensor-parallel ranks vary fastest,
// then context-parallel, then data-parallel, then pipeline):
//   rank = ((pp * dp_size + dp) * cp_size + cp) * tp_size + tp
//
//   16 ranks, tp_size 2, pp_size 4 (dp_size 2):    pp 0     pp 1     pp 2      pp 3
//                                         dp 0   [0 1]    [4 5]    [8 9]    [12 13]
//                                         dp 1   [2 3]    [6 7]   [10 11]   [14 15]
//   a tp group is a [pair]; a dp group a column within a pp stage ({0, 2}); a pp group a row
//   across stages ({0, 4, 8, 12}); the embedding group a pp group's ends ({0, 12}).
//
//   16 ranks, tp 2, cp 2, pp 2 (dp 2):   pp 0                 pp 1
//                                 dp 0   cp0 [0 1] cp1 [2 3]     [8 9]  [10 11]
//                                 dp 1   cp0 [4 5] cp1 [6 7]   [12 13]  [14 15]
//   a cp group holds the same tp rank of each cp block ({0, 2}); dp groups skip over the cp
//   blocks ({0, 4}); the dp-cp group, over which gradients are reduced and ZeRO shards, is
//   both ({0, 2, 4, 6}, ranked cp fastest).
#pragma once

#include <memory>
#include <vector>

#include "core/layout.h"
#include "parallel/comm/communicator.h"

namespace trident {

// A rank's place in the grid.
struct GridCoordinates {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};

// The first and last stage of each pipeline of `grid` (one rank without pipelining): the ranks
// that hold the tied word embedding. With `ends_on_first_stage` (chunks in a V: ZB-V, DualPipe-V)
// the first stage holds both ends alone.
std::vector<std::vector<int>> embedding_groups(const ProcessGrid& grid, bool ends_on_first_stage = false);

class ProcessGroups {
 public:
  // Collective over `world`: every rank splits out its groups.
  ProcessGroups(std::shared_ptr<Communicator> world, const Layout& layout);

  // A group along `axes` of `grid` (the layout's grid(), or a view of it), named `name` in
  // errors. Collective over world(): every rank asks for the same groups in the same order.
  std::shared_ptr<Communicator> split(const ProcessGrid& grid, const std::vector<std::string>& axes,
                                      const std::string& name) const;

  Communicator& world() const { return *world_; }
  Communicator& tp_group() const { return *tp_; }
  Communicator& dp_group() const { return *dp_; }
  Communicator& dp_cp_group() const { return *dp_cp_; }
  Communicator& pp_group() const { return *pp_; }
  Communicator& embedding_group() const { return *embedding_; }
  Communicator& mp_group() const { return *mp_; }
  // The experts' groups (Layout::expert_grid()): the ranks that split a stage's experts, and
  // those holding copies of the same experts (over which their gradients are reduced and ZeRO
  // shards them). Without expert parallelism, a group of one and the data-and-context group.
  Communicator& ep_group() const { return *ep_; }
  Communicator& edp_group() const { return *edp_; }
  std::shared_ptr<Communicator> shared_ep_group() const { return ep_; }
  // Shared ownership for layers that keep their group (tensor- and context-parallel layers).
  std::shared_ptr<Communicator> shared_tp_group() const { return tp_; }
  std::shared_ptr<Communicator> shared_cp_group() const { return cp_; }
  std::shared_ptr<Communicator> shared_ulysses_group() const { return ulysses_; }
  std::shared_ptr<Communicator> shared_ring_group() const { return ring_; }

  const GridCoordinates& coordinates() const { return coordinates_; }
  TensorParallelPlace tp_place() const { return {coordinates_.tp, layout_.tp_size}; }
  ExpertParallelPlace ep_place() const { return {ep_->rank(), layout_.ep_size}; }

 private:
  Layout layout_;
  GridCoordinates coordinates_;
  std::shared_ptr<Communicator> world_, tp_, cp_, ulysses_, ring_, dp_, dp_cp_, pp_, embedding_, mp_, ep_, edp_;
};

}  // namespace trident
