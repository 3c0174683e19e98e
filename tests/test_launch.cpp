#include <gtest/gtest.h>

#include <map>

#include "parallel/launch.h"
#include "core/layout.h"
#include "parallel/process_groups.h"
#include "tests/helpers.h"

using namespace trident;
using trident::testing::error_of;

namespace {

EnvLookup env(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

Config config(std::vector<std::string> overrides) {
  overrides.push_back("data.type=synthetic");
  return Config::parse("", overrides);
}

}  // namespace

TEST(Launch, SingleProcessWhenNothingIsSet) {
  LaunchInfo info = detect_launch(env({}));
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.launcher, "single process");
}

TEST(Launch, Torchrun) {
  LaunchInfo info = detect_launch(env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                                       {"MASTER_PORT", "29500"},
                                       {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.master_addr, "10.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
  EXPECT_TRUE(info.agent_store);
}

TEST(Launch, OpenMpiAndSlurm) {
  LaunchInfo mpi = detect_launch(env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  EXPECT_EQ(mpi.launcher, "mpirun");
  EXPECT_EQ(mpi.rank, 1);
  EXPECT_EQ(mpi.world_size, 4);
  LaunchInfo slurm = detect_launch(env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"},
                                        {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(slurm.launcher, "slurm");
  EXPECT_EQ(slurm.rank, 5);
}

TEST(Launch, PartialOrInconsistentVariablesAreErrors) {
  auto message = error_of([] { detect_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}})); });
  EXPECT_NE(message.find("missing MASTER_ADDR, MASTER_PORT"), std::string::npos) << message;
  message = error_of([] {
    detect_launch(env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}));
  });
  EXPECT_NE(message.find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos) << message;
  message = error_of([] { detect_launch(env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "two"}})); });
  EXPECT_NE(message.find("OMPI_COMM_WORLD_SIZE='two' is not a non-negative integer"),
            std::string::npos) << message;
  message = error_of([] {
    detect_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}}));
  });
  EXPECT_NE(message.find("MASTER_PORT=99999 is not a port"), std::string::npos) << message;
  message = error_of([] { detect_launch(env({{"SLURM_NTASKS", "4"}})); });
  EXPECT_NE(message.find("SLURM variables are incomplete; SLURM_PROCID is not set"), std::string::npos)
      << message;
  message = error_of([] { detect_launch(env({{"SLURM_PROCID", "1"}})); });
  EXPECT_NE(message.find("SLURM_NTASKS is not set"), std::string::npos) << message;
}

TEST(Layout, MicroBatchesAreTheAccumulationSteps) {
  Layout layout = resolve_layout(
      config({"parallel.tensor=2", "parallel.pipeline=2", "batch.micro_batch_size=2",
              "batch.global_batch_size=16"}),
      16);
  EXPECT_EQ(layout.dp_size, 4);
  EXPECT_EQ(layout.micro_batches, 2);  // 16 / (2 * 4)
}

TEST(Layout, ErrorsNameTheKeys) {
  auto message = error_of([] { resolve_layout(config({"parallel.tensor=4"}), 6); });
  EXPECT_NE(message.find("world size 6 is not divisible by parallel.tensor * parallel.pipeline"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.data=3"}), 2); });
  EXPECT_NE(message.find("parallel.data=3 but world size 2"), std::string::npos) << message;
  message = error_of([] {
    resolve_layout(config({"parallel.pipeline=2", "parallel.schedule=interleaved_1f1b",
                           "parallel.virtual_stages=2", "batch.global_batch_size=12"}),
                   2);
  });
  EXPECT_NE(message.find("needs a multiple of parallel.pipeline (2) micro-batches"), std::string::npos)
      << message;
  message = error_of([] { resolve_layout(config({"parallel.tensor=3"}), 3); });
  EXPECT_NE(message.find("model.num_attention_heads (4) must be divisible by parallel.tensor (3)"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.virtual_stages=2"}), 1); });
  EXPECT_NE(message.find("parallel.schedule=interleaved_1f1b and parallel.virtual_stages > 1 go together"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"batch.global_batch_size=8"}), 4); });
  EXPECT_NE(message.find("must be a multiple of batch.micro_batch_size * data-parallel size = 4 * 4"),
            std::string::npos) << message;
}

// The example of Megatron's initialize_model_parallel docstring: 16 ranks, TP 2, PP 4 (DP 2).
TEST(ProcessGrid, MatchesMegatronsSixteenRankExample) {
  const GridGroups g = grid_groups(16, 2, 4);
  using Groups = std::vector<std::vector<int>>;
  EXPECT_EQ(g.tp, (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.dp, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.pp, (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.embedding, (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(g.mp, (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  const GridCoordinates c = grid_coordinates(11, 2, 2);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 2);
}

TEST(ProcessGrid, EveryRankIsInExactlyOneGroupOfEachKind) {
  const GridGroups g = grid_groups(24, 2, 3);
  for (const auto* kind : {&g.tp, &g.dp, &g.pp, &g.mp}) {
    std::vector<int> seen(24, 0);
    for (const auto& group : *kind)
      for (int rank : group) ++seen[size_t(rank)];
    EXPECT_EQ(seen, std::vector<int>(24, 1));
  }
  EXPECT_THROW(grid_groups(10, 4, 1), Error);
}
