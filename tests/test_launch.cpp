// parallel/comm/launch.h: who this process is, from torchrun, Open MPI or SLURM variables.
#include <gtest/gtest.h>

#include <map>

#include "parallel/comm/launch.h"
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
  // torchrun-style variables left around an mpirun job that they do not describe.
  message = error_of([] {
    detect_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                       {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  });
  EXPECT_NE(message.find("RANK=0 WORLD_SIZE=2 (torchrun-style) disagree with OMPI_COMM_WORLD_RANK=1 "
                         "OMPI_COMM_WORLD_SIZE=2 (mpirun)"), std::string::npos) << message;
}

// A mistake in the launch variables is said once per job: by the process that looks like rank 0,
// or by any process that cannot tell its rank.
TEST(Launch, TheApparentRankDecidesWhoReportsALaunchError) {
  EXPECT_EQ(apparent_rank(env({{"OMPI_COMM_WORLD_RANK", "1"}, {"RANK", "1"}})), 1);
  EXPECT_EQ(apparent_rank(env({{"RANK", "0"}})), 0);
  EXPECT_EQ(apparent_rank(env({{"SLURM_PROCID", "3"}, {"RANK", "0"}})), 0);  // torchrun inside srun
  EXPECT_EQ(apparent_rank(env({{"OMPI_COMM_WORLD_RANK", "1"}, {"RANK", "0"}})), std::nullopt);
  EXPECT_EQ(apparent_rank(env({{"RANK", "one"}})), std::nullopt);
  EXPECT_EQ(apparent_rank(env({})), std::nullopt);
}

// Only a mistake every process shares is left to rank 0; one of this process's own is its to say.
TEST(Launch, AMistakeOfOneProcessIsNotLeftToRankZero) {
  EXPECT_TRUE(shared_mistake(env({{"RANK", "1"}, {"WORLD_SIZE", "2"}})));  // no MASTER_ADDR anywhere
  EXPECT_FALSE(shared_mistake(env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})));
  EXPECT_FALSE(shared_mistake(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                                   {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}})));
}
