// Failure points for tests: every step of trident's file writing (a file created, its first
// write, its flush, a rename, a folder flushed) passes a numbered point. With the environment
// variable TRIDENT_FAULT_AT=N, the N-th point of the process fails as the disk would (the step's
// own error, with "Input/output error"); with TRIDENT_FAULT_AT=N:kill, the process is killed
// there (SIGKILL: no cleanup, as a crash or an OOM kill). A test loops N = 1, 2, ... until a run
// passes every point, so that each step is tried in turn rather than a few timings.
#pragma once

#include <cstdint>

namespace trident {

// True when this point is the one to fail (the caller then fails as the disk would); kills the
// process when the failure asked for is a kill. Numbered in the order the process reaches them.
bool fault_point();
// For a test in one process: the `point`-th point from now on fails (0: none).
void inject_fault_at(int64_t point);

}  // namespace trident
