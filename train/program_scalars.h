// A program's own values (IterationMetrics::scalars, added by Hooks::after_step) from whichever
// rank computes them: a value only the last pipeline stage knows (from Hooks::loss, say) reaches
// rank 0's log line, metrics file and TensorBoard.
#pragma once

#include "parallel/comm/communicator.h"
#include "train/metrics.h"

namespace trident {

// Every rank's m.scalars, on every rank of `world`: the names in the order the ranks add them,
// rank 0's first; a name several ranks add takes the lowest of those ranks' value. Collective:
// every rank calls it for the same iteration.
void gather_program_scalars(Communicator& world, IterationMetrics& m);

}  // namespace trident
