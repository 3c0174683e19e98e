// How the tests start real multi-process jobs: mpirun (Open MPI, oversubscribed),
// tests/launch_env.sh (torchrun-style variables, env://) and tests/launch_hosts.sh (the same
// across simulated hosts, one network namespace per rank).
#pragma once

#include <cstdio>
#include <string>

#include "tests/build_paths.h"

namespace trident::testing {

inline const std::string kBin = TRIDENT_BINARY_DIR;
inline const std::string kSource = TRIDENT_SOURCE_DIR;
inline const std::string kMpirun =
    std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") + TRIDENT_MPIEXEC +
    " --oversubscribe -np ";
inline const std::string kEnvLaunch = kSource + "/tests/launch_env.sh ";
inline const std::string kHostsLaunch = kSource + "/tests/launch_hosts.sh ";

// Why hosts cannot be simulated on this machine ("" when they can): launch_hosts.sh --check.
inline std::string missing_hosts() {
  static const std::string why = [] {
    std::string out;
    FILE* check = popen((kHostsLaunch + "--check 2>&1").c_str(), "r");
    if (!check) return std::string("cannot run launch_hosts.sh --check");
    char buffer[256];
    while (fgets(buffer, sizeof buffer, check)) out += buffer;
    if (pclose(check) == 0) return std::string();
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }();
  return why;
}

// Why `launcher` cannot run in this build ("" when it can): env:// launches on the CPU need
// Gloo (pip's LibTorch wheels have no Gloo headers), mpirun needs MPI.
inline std::string missing_backend(const std::string& launcher) {
#ifndef TRIDENT_WITH_GLOO
  if (launcher.rfind(kEnvLaunch, 0) == 0 || launcher.rfind(kHostsLaunch, 0) == 0)
    return "built without Gloo, which env:// launches need";
#endif
  if (launcher.rfind(kHostsLaunch, 0) == 0) return missing_hosts();
#ifndef TRIDENT_WITH_MPI
  if (launcher.rfind(kMpirun, 0) == 0) return "built without MPI";
#endif
  (void)launcher;
  return "";
}

}  // namespace trident::testing
