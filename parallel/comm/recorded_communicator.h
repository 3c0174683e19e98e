// A communicator whose operations the flight recorder sees (parallel/comm/flight_recorder.h):
// each call is numbered on its group and timed (the time this rank waited in it), and an error
// from one says which rank of the group was behind.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace trident {

// `inner` recorded; `world_ranks`: the world rank of each of its members, in its rank order.
// Groups split from it are recorded too.
std::shared_ptr<Communicator> recorded(std::shared_ptr<Communicator> inner, std::vector<int> world_ranks);

}  // namespace trident
