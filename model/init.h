// Layout-independent initialization: every parameter is drawn whole from (seed, its name),
// so any later sharding takes a slice of the same values the single-process model has.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace trident {

// N(0, std) of shape `full_shape` in float64, from a generator keyed by (seed, name).
torch::Tensor init_normal(const std::string& name, torch::IntArrayRef full_shape, double std,
                          uint64_t seed);

}  // namespace trident
