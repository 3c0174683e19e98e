#define TRIDENT_BUILD_PATHS_DEFINITIONS
#include "tests/build_paths.h"

namespace trident::testing {
const char* const kBinaryDirPath = TRIDENT_BINARY_DIR;
const char* const kSourceDirPath = TRIDENT_SOURCE_DIR;
const char* const kMpiexecPath = TRIDENT_MPIEXEC;
}  // namespace trident::testing
