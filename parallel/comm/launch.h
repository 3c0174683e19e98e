// Who am I in the job: rank, world size and local rank, from the launcher's environment.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

namespace trident {

struct LaunchInfo {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr;  // torchrun only
  int64_t master_port = 0;  // torchrun only
  bool agent_store = false; // TORCHELASTIC_USE_AGENT_STORE: every rank is a TCPStore client
  int64_t restart_count = 0; // TORCHELASTIC_RESTART_COUNT: torchrun's attempt (keys apart in its store)
  std::string launcher = "single process";  // torchrun | mpirun | slurm | single process
  // What tells this job from another in shared folders (flight records): SLURM's job and step,
  // Open MPI's job id, torchrun's MASTER_PORT; "" for a single process.
  std::string job;
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads, in this order, torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE) and SLURM
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); none of them means a single process.
// Partial or inconsistent variables throw Error naming them.
LaunchInfo detect_launch(const EnvLookup& env = [](const char* name) { return std::getenv(name); });

// The rank this process seems to have, from the first of OMPI_COMM_WORLD_RANK, RANK and
// SLURM_PROCID that is set, when it reads as a rank (and Open MPI's and torchrun's agree);
// nothing otherwise.
std::optional<int64_t> apparent_rank(const EnvLookup& env = [](const char* name) { return std::getenv(name); });

// Whether the launch variables' mistake is one every process of the job shares: they fail as
// well with this process's rank variables set to 0.
bool shared_mistake(const EnvLookup& env = [](const char* name) { return std::getenv(name); });

// For a program's start: this process's launch, with the log told its rank; or, when the
// variables are wrong, nothing after printing why: a shared_mistake once for the job, by the
// process whose apparent_rank is 0; any other by the process that has it.
std::optional<LaunchInfo> detect_launch_or_report();

}  // namespace trident
