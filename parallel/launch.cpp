#include "parallel/launch.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace trident {
namespace {

int64_t integer_variable(const EnvLookup& env, const char* name, int64_t fallback, bool required) {
  const char* value = env(name);
  if (!value || !*value) {
    if (required) fail("launch environment: ", name, " is not set");
    return fallback;
  }
  int64_t out = 0;
  auto [end, ec] = std::from_chars(value, value + std::strlen(value), out);
  if (ec != std::errc() || *end != '\0' || out < 0)
    fail("launch environment: ", name, "='", value, "' is not a non-negative integer");
  return out;
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
  info.rank = integer_variable(env, "RANK", 0, true);
  info.world_size = integer_variable(env, "WORLD_SIZE", 1, true);
  info.local_rank = integer_variable(env, "LOCAL_RANK", 0, false);
  info.local_world_size = integer_variable(env, "LOCAL_WORLD_SIZE", info.world_size, false);
  info.master_addr = env("MASTER_ADDR");
  info.master_port = integer_variable(env, "MASTER_PORT", 0, true);
  if (info.master_port < 1 || info.master_port > 65535)
    fail("launch environment: MASTER_PORT=", info.master_port, " is not a port (1-65535)");
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  info.agent_store = agent && std::strcmp(agent, "True") == 0;
  check_ranks(info, "RANK", "WORLD_SIZE");
  return info;
}

LaunchInfo from_open_mpi(const EnvLookup& env) {
  LaunchInfo info;
  info.launcher = "mpirun";
  info.rank = integer_variable(env, "OMPI_COMM_WORLD_RANK", 0, true);
  info.world_size = integer_variable(env, "OMPI_COMM_WORLD_SIZE", 1, true);
  info.local_rank = integer_variable(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, false);
  info.local_world_size = integer_variable(env, "OMPI_COMM_WORLD_LOCAL_SIZE", info.world_size, false);
  check_ranks(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  return info;
}

LaunchInfo from_slurm(const EnvLookup& env) {
  LaunchInfo info;
  info.launcher = "slurm";
  info.rank = integer_variable(env, "SLURM_PROCID", 0, true);
  info.world_size = integer_variable(env, "SLURM_NTASKS", 1, true);
  info.local_rank = integer_variable(env, "SLURM_LOCALID", 0, false);
  // SLURM_NTASKS_PER_NODE may read "4(x2)": the world size is the honest bound on this node.
  info.local_world_size = info.world_size;
  check_ranks(info, "SLURM_PROCID", "SLURM_NTASKS");
  return info;
}

}  // namespace

LaunchInfo detect_launch(const EnvLookup& env) {
  auto set = [&](const char* name) { return env(name) && *env(name); };
  if (set("RANK") || set("WORLD_SIZE")) return from_torchrun(env);
  if (set("OMPI_COMM_WORLD_SIZE") || set("OMPI_COMM_WORLD_RANK")) return from_open_mpi(env);
  if (set("SLURM_PROCID") && set("SLURM_NTASKS")) return from_slurm(env);
  return LaunchInfo{};
}

}  // namespace trident
