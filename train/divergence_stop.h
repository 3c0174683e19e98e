// How a run that diverged stops: together on every rank, with the checkpoints that hold the
// weights which gave the bad losses marked unhealthy, and the last healthy one named.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

class CheckpointStore;

// Throws JobError on every rank of `world_size`: the run diverged at `iteration`, for the reason
// `what`, its bad losses starting at `first_bad`. The checkpoints of `checkpoints` (none when
// null) from the iteration before `first_bad` on are marked unhealthy by the rank that
// `marks` (rank 0; best effort: the error is what matters), so that rotation and a resume know.
[[noreturn]] void stop_diverged(CheckpointStore* checkpoints, bool marks, int world_size, const std::string& what,
                                int64_t iteration, int64_t first_bad);

}  // namespace trident
