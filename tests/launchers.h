// How the tests start real multi-process jobs: mpirun (Open MPI, oversubscribed) and
// tests/launch_env.sh (torchrun-style variables, env://).
#pragma once

#include <string>

namespace trident::testing {

inline const std::string kBin = TRIDENT_BINARY_DIR;
inline const std::string kSource = TRIDENT_SOURCE_DIR;
inline const std::string kMpirun =
    std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") + TRIDENT_MPIEXEC +
    " --oversubscribe -np ";
inline const std::string kEnvLaunch = kSource + "/tests/launch_env.sh ";

// Why `launcher` cannot run in this build ("" when it can): env:// launches on the CPU need
// Gloo (pip's LibTorch wheels have no Gloo headers), mpirun needs MPI.
inline std::string missing_backend(const std::string& launcher) {
#ifndef TRIDENT_WITH_GLOO
  if (launcher.rfind(kEnvLaunch, 0) == 0) return "built without Gloo, which env:// launches need";
#endif
#ifndef TRIDENT_WITH_MPI
  if (launcher.rfind(kMpirun, 0) == 0) return "built without MPI";
#endif
  (void)launcher;
  return "";
}

}  // namespace trident::testing
