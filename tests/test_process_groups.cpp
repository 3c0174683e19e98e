// core/process_grid.h and the Megatron grid of Layout::grid() as rank lists (the groups themselves
// are split with real processes in comm_collectives.cpp).
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/layout.h"
#include "parallel/comm/process_groups.h"

using namespace trident;
using Groups = std::vector<std::vector<int>>;

namespace {

ProcessGrid megatron_grid(int64_t tp, int64_t cp, int64_t dp, int64_t pp) {
  Layout layout;
  layout.tp_size = tp, layout.cp_size = cp, layout.dp_size = dp, layout.pp_size = pp;
  return layout.grid();
}

}  // namespace

// The example of Megatron's initialize_model_parallel docstring: 16 ranks, TP 2, PP 4 (DP 2).
TEST(ProcessGrid, MatchesMegatronsSixteenRankExample) {
  const ProcessGrid grid = megatron_grid(2, 1, 2, 4);
  EXPECT_EQ(grid.groups({"tp"}), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(grid.groups({"dp"}), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(grid.groups({"pp"}), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(embedding_groups(grid), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(grid.groups({"tp", "pp"}), (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(grid.coordinate(11, "tp"), 1);
  EXPECT_EQ(grid.coordinate(11, "dp"), 1);
  EXPECT_EQ(grid.coordinate(11, "pp"), 2);
  EXPECT_EQ(embedding_groups(megatron_grid(2, 1, 2, 1)), (Groups{{0}, {1}, {2}, {3}}));
}

// The sixteen ranks again with a context-parallel axis between TP and DP: TP 2 x CP 2 x PP 2
// (DP 2), as Megatron orders them (tp-cp-dp-pp).
TEST(ProcessGrid, ContextParallelRanksSitBetweenTensorAndData) {
  const ProcessGrid grid = megatron_grid(2, 2, 2, 2);
  EXPECT_EQ(grid.groups({"tp"}), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(grid.groups({"cp"}), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(grid.groups({"dp"}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(grid.groups({"cp", "dp"}), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(grid.groups({"dp", "cp"}), grid.groups({"cp", "dp"}));  // the order named does not matter
  EXPECT_EQ(grid.groups({"pp"}), (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(grid.groups({"tp", "pp"}), (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  // 14 = ((1 * 2 + 1) * 2 + 1) * 2 + 0
  EXPECT_EQ(grid.coordinate(14, "tp"), 0);
  EXPECT_EQ(grid.coordinate(14, "cp"), 1);
  EXPECT_EQ(grid.coordinate(14, "dp"), 1);
  EXPECT_EQ(grid.coordinate(14, "pp"), 1);
  // The blocks of consecutive ranks that hold a kind of group: whether it stays within a node.
  EXPECT_EQ(grid.extent({"tp"}), 2);
  EXPECT_EQ(grid.extent({"cp"}), 4);
  EXPECT_EQ(grid.extent({"cp", "dp"}), 8);
  EXPECT_EQ(grid.extent({"tp", "pp"}), 16);
  EXPECT_EQ(grid.extent({}), 1);
}

TEST(ProcessGrid, EveryRankIsInExactlyOneGroupAlongAnyAxes) {
  const ProcessGrid grid = megatron_grid(2, 2, 4, 3);
  for (const std::vector<std::string>& axes : std::vector<std::vector<std::string>>{
           {"tp"}, {"cp"}, {"dp"}, {"pp"}, {"cp", "dp"}, {"tp", "pp"}, {"tp", "dp", "pp"}, {}}) {
    std::vector<int> seen(48, 0);
    int64_t members = 1;
    for (const auto& axis : axes) members *= grid.size(axis);
    for (const auto& group : grid.groups(axes)) {
      EXPECT_EQ(int64_t(group.size()), members);
      for (int rank : group) ++seen[size_t(rank)];
    }
    EXPECT_EQ(seen, std::vector<int>(48, 1));
  }
}

// Megatron's expert layout as a view: a pipeline stage's TP x CP x DP ranks (2 x 1 x 4) seen as
// expert-TP 1 x expert-parallel 4 x expert-data-parallel 2. Expert-parallel groups are 4
// consecutive ranks of a stage, expert-data-parallel groups their strided copies; the pipeline
// axis and everything outside the view are unchanged.
TEST(ProcessGrid, AViewFactorsTheSameRanksAnotherWay) {
  const ProcessGrid grid = megatron_grid(2, 1, 4, 2);
  const ProcessGrid experts = grid.view({"tp", "cp", "dp"}, {{"etp", 1}, {"ep", 4}, {"edp", 2}});
  EXPECT_EQ(experts.world_size(), 16);
  EXPECT_EQ(experts.groups({"ep"}), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(experts.groups({"edp"}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(experts.groups({"pp"}), grid.groups({"pp"}));
  EXPECT_EQ(experts.groups({"etp", "ep", "edp"}), grid.groups({"tp", "cp", "dp"}));
  // Expert TP equal to TP: the experts' TP groups are the dense layers'.
  const ProcessGrid with_tp = grid.view({"tp", "cp", "dp"}, {{"etp", 2}, {"ep", 2}, {"edp", 2}});
  EXPECT_EQ(with_tp.groups({"etp"}), grid.groups({"tp"}));
  EXPECT_EQ(with_tp.groups({"ep"}), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
}

// Mistakes in trident's own code (a layout's sizes are checked by resolve_layout first).
TEST(ProcessGrid, RefusesAxesItCannotHold) {
  EXPECT_THROW(ProcessGrid({{"tp", 2}, {"tp", 2}}), InternalError);
  EXPECT_THROW(ProcessGrid({{"tp", 0}}), InternalError);
  const ProcessGrid grid = megatron_grid(2, 2, 2, 1);
  EXPECT_THROW(grid.groups({"ep"}), InternalError);
  EXPECT_THROW(grid.groups({"tp", "tp"}), InternalError);
  EXPECT_THROW(grid.coordinate(8, "tp"), InternalError);
  EXPECT_THROW(grid.view({"tp", "dp"}, {{"ep", 4}}), InternalError);  // not adjacent
  EXPECT_THROW(grid.view({"tp", "cp"}, {{"ep", 3}}), InternalError);  // 3 ranks for 4
  try {
    (void)grid.groups({"ep"});
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("no grid axis ep among tp, cp, dp, pp"), std::string::npos) << e.what();
  }
}
