#include "parallel/comm/launch.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "core/text.h"

namespace trident {
namespace {

// A launcher's variable as a non-negative integer; `fallback` when it is not set.
int64_t optional_integer(const EnvLookup& env, const char* name, int64_t fallback) {
  const char* value = env(name);
  if (!value || !*value) return fallback;
  int64_t out = 0;
  auto [end, ec] = std::from_chars(value, value + std::strlen(value), out);
  if (ec != std::errc() || *end != '\0' || out < 0)
    fail("launch environment: ", name, "='", value, "' is not a non-negative integer");
  return out;
}

int64_t required_integer(const EnvLookup& env, const char* name) {
  if (!env(name) || !*env(name)) fail("launch environment: ", name, " is not set");
  return optional_integer(env, name, 0);
}

void check_ranks(const LaunchInfo& info, const char* rank_name, const char* size_name) {
  if (info.world_size < 1) fail("launch environment: ", size_name, " must be at least 1");
  if (info.rank >= info.world_size)
    fail("launch environment: ", rank_name, "=", info.rank, " is not below ", size_name, "=",
         info.world_size);
  if (info.local_rank >= info.local_world_size)
    fail("launch environment: local rank ", info.local_rank, " is not below the local world size ",
         info.local_world_size);
}

LaunchInfo from_torchrun(const EnvLookup& env) {
  std::vector<std::string> missing;
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    if (!env(name) || !*env(name)) missing.push_back(name);
  if (!missing.empty())
    fail("launch environment: torchrun-style variables are incomplete; missing ",
         join(missing, ", "), " (set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together)");
  LaunchInfo info;
  info.launcher = "torchrun";
  info.rank = required_integer(env, "RANK");
  info.world_size = required_integer(env, "WORLD_SIZE");
  info.local_rank = optional_integer(env, "LOCAL_RANK", 0);
  info.local_world_size = optional_integer(env, "LOCAL_WORLD_SIZE", info.world_size);
  info.master_addr = env("MASTER_ADDR");
  info.master_port = required_integer(env, "MASTER_PORT");
  if (info.master_port < 1 || info.master_port > 65535)
    fail("launch environment: MASTER_PORT=", info.master_port, " is not a port (1-65535)");
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  info.agent_store = agent && std::strcmp(agent, "True") == 0;
  info.restart_count = optional_integer(env, "TORCHELASTIC_RESTART_COUNT", 0);
  check_ranks(info, "RANK", "WORLD_SIZE");
  // Two jobs on the default port differ in torchrun's run id (--rdzv-id), when it gives one.
  const char* run_id = env("TORCHELASTIC_RUN_ID");
  info.job = str("torchrun-", run_id && *run_id ? str(run_id, "-") : "", info.master_port);
  return info;
}

// Launchers that name rank, size and local rank in variables of their own.
struct LauncherVariables {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // nullptr: bounded by the world size
};

constexpr LauncherVariables kOpenMpi = {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
// SLURM_NTASKS_PER_NODE may read "4(x2)", so SLURM's local size is left to the world size.
constexpr LauncherVariables kSlurm = {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                      nullptr};

LaunchInfo from_launcher(const EnvLookup& env, const LauncherVariables& names) {
  LaunchInfo info;
  info.launcher = names.launcher;
  info.rank = required_integer(env, names.rank);
  info.world_size = required_integer(env, names.size);
  info.local_rank = optional_integer(env, names.local_rank, 0);
  info.local_world_size = names.local_size
                              ? optional_integer(env, names.local_size, info.world_size)
                              : info.world_size;
  check_ranks(info, names.rank, names.size);
  for (const char* id : {"SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"})
    if (env(id) && *env(id)) {
      info.job = str(names.launcher, "-", env(id));
      if (info.launcher == "slurm" && env("SLURM_STEP_ID")) info.job += str(".", env("SLURM_STEP_ID"));
      break;
    }
  return info;
}

// torchrun-style variables around a process that mpirun started (exported in the shell, or by a
// wrapper) describe another job: they must agree with Open MPI's, else mpirun's are the truth.
void check_not_mixed(const EnvLookup& env, const LaunchInfo& torchrun) {
  if (!env(kOpenMpi.size) || !*env(kOpenMpi.size)) return;
  const LaunchInfo mpi = from_launcher(env, kOpenMpi);
  if (mpi.rank != torchrun.rank || mpi.world_size != torchrun.world_size)
    fail("launch environment: RANK=", torchrun.rank, " WORLD_SIZE=", torchrun.world_size,
         " (torchrun-style) disagree with ", kOpenMpi.rank, "=", mpi.rank, " ", kOpenMpi.size, "=", mpi.world_size,
         " (mpirun): unset RANK and WORLD_SIZE under mpirun, or start the job without mpirun");
}

}  // namespace

std::optional<int64_t> apparent_rank(const EnvLookup& env) {
  std::vector<int64_t> ranks;
  for (const char* name : {kOpenMpi.rank, "RANK", kSlurm.rank}) {
    if (!env(name) || !*env(name)) continue;
    try {
      ranks.push_back(optional_integer(env, name, 0));
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  // SLURM's rank is srun's task, which mpirun or torchrun inside it may subdivide: it only
  // counts alone. Open MPI's and torchrun's must agree.
  if (ranks.empty() || (ranks.size() > 1 && env(kOpenMpi.rank) && env("RANK") && ranks[0] != ranks[1]))
    return std::nullopt;
  return ranks.front();
}

bool shared_mistake(const EnvLookup& env) {
  const EnvLookup as_rank_zero = [&](const char* name) -> const char* {
    for (const char* rank : {kOpenMpi.rank, kOpenMpi.local_rank, "RANK", "LOCAL_RANK", kSlurm.rank, kSlurm.local_rank})
      if (std::strcmp(name, rank) == 0) return env(name) && *env(name) ? "0" : env(name);
    return env(name);
  };
  try {
    detect_launch(as_rank_zero);
    return false;
  } catch (const Error&) {
    return true;
  }
}

LaunchInfo detect_launch(const EnvLookup& env) {
  auto set = [&](const char* name) { return env(name) && *env(name); };
  if (set("RANK") || set("WORLD_SIZE")) {
    LaunchInfo info = from_torchrun(env);
    check_not_mixed(env, info);
    return info;
  }
  if (set(kOpenMpi.size) || set(kOpenMpi.rank)) return from_launcher(env, kOpenMpi);
  if (set(kSlurm.rank) && set(kSlurm.size)) return from_launcher(env, kSlurm);
  // Outside srun, a SLURM allocation's shell sets SLURM_NTASKS but no SLURM_PROCID.
  if (set(kSlurm.rank) || set(kSlurm.size))
    fail("launch environment: SLURM variables are incomplete; ", set(kSlurm.rank) ? kSlurm.size : kSlurm.rank,
         " is not set (start the job with srun, or unset ", set(kSlurm.rank) ? kSlurm.rank : kSlurm.size,
         " to run a single process)");
  return LaunchInfo{};
}

std::optional<LaunchInfo> detect_launch_or_report() {
  try {
    const LaunchInfo launch = detect_launch();
    log::set_process(int(launch.rank), int(launch.world_size));
    return launch;
  } catch (const std::exception& e) {
    // A mistake every process of the job shares (the same variables, ranks aside) is said by the
    // one that looks like rank 0, for all; one of this process's own (its rank beyond the world
    // size, variables that disagree) and one of a process that cannot tell its rank, by it.
    const std::optional<int64_t> rank = apparent_rank();
    if (!rank || *rank == 0 || !shared_mistake()) log::error(e.what());
    return std::nullopt;
  }
}

}  // namespace trident
