// Where this build's programs and sources are, and the mpiexec it found. Only
// tests/build_paths.cpp is compiled with them (CMake's definitions of the same names), so that
// every other test source compiles alike in any checkout and ccache serves a fresh clone's build.
#pragma once

namespace trident::testing {
extern const char* const kBinaryDirPath;
extern const char* const kSourceDirPath;
extern const char* const kMpiexecPath;
}  // namespace trident::testing

#ifndef TRIDENT_BUILD_PATHS_DEFINITIONS
#define TRIDENT_BINARY_DIR (::trident::testing::kBinaryDirPath)
#define TRIDENT_SOURCE_DIR (::trident::testing::kSourceDirPath)
#define TRIDENT_MPIEXEC (::trident::testing::kMpiexecPath)
#endif
