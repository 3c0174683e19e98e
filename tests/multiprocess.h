// The world communicator of a multi-process test binary (tests/multiprocess_main.cpp).
#pragma once

#include <memory>

#include "parallel/comm/communicator.h"

namespace trident::testing {

Communicator& world();
std::shared_ptr<Communicator> world_shared();

}  // namespace trident::testing
