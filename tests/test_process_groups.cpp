// parallel/comm/process_groups.h: the Megatron process grid as rank lists (the groups themselves are
// tested with real processes in comm_collectives.cpp).
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/comm/process_groups.h"

using namespace trident;

// The example of Megatron's initialize_model_parallel docstring: 16 ranks, TP 2, PP 4 (DP 2).
TEST(ProcessGrid, MatchesMegatronsSixteenRankExample) {
  const GridGroups g = grid_groups(16, 2, 1, 4);
  using Groups = std::vector<std::vector<int>>;
  EXPECT_EQ(g.tp, (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.dp, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.pp, (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.embedding, (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(g.mp, (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  const GridCoordinates c = grid_coordinates(11, 2, 1, 2);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 2);
}

// The sixteen ranks again with a context-parallel axis between TP and DP: TP 2 x CP 2 x PP 2
// (DP 2), as Megatron orders them (tp-cp-dp-pp).
TEST(ProcessGrid, ContextParallelRanksSitBetweenTensorAndData) {
  const GridGroups g = grid_groups(16, 2, 2, 2);
  using Groups = std::vector<std::vector<int>>;
  EXPECT_EQ(g.tp, (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.cp, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.dp, (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(g.dp_cp, (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.pp, (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(g.mp, (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  const GridCoordinates c = grid_coordinates(14, 2, 2, 2);  // 14 = ((1 * 2 + 1) * 2 + 1) * 2 + 0
  EXPECT_EQ(c.tp, 0);
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
}

TEST(ProcessGrid, EveryRankIsInExactlyOneGroupOfEachKind) {
  const GridGroups g = grid_groups(48, 2, 2, 3);
  for (const auto* kind : {&g.tp, &g.cp, &g.dp, &g.dp_cp, &g.pp, &g.mp}) {
    std::vector<int> seen(48, 0);
    for (const auto& group : *kind)
      for (int rank : group) ++seen[size_t(rank)];
    EXPECT_EQ(seen, std::vector<int>(48, 1));
  }
  EXPECT_THROW(grid_groups(10, 4, 1, 1), InternalError);  // resolve_layout reports bad sizes first
  EXPECT_THROW(grid_groups(12, 2, 4, 1), InternalError);
}
