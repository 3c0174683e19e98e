// Layout-independent initialization: every parameter is drawn whole from (seed, its name),
// so any later sharding takes a slice of the same values the single-process model has.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "core/layout.h"

namespace trident {

// N(0, std) of shape `full_shape` in float64, from a generator keyed by (seed, name).
torch::Tensor init_normal(const std::string& name, torch::IntArrayRef full_shape, double std,
                          uint64_t seed);

// Sets every parameter of `module` as its role says (parallel/parameter_role.h): zeros, ones,
// or N(0, std) (N(0, residual_std) for Init::residual) drawn whole and sliced to this rank's
// part along the role's partition dimension, for tensor-parallel place `tp`; stacked experts one
// by one, each from its own name ("h3.moe.up[5]") for its global index, only those of
// expert-parallel place `ep`: every layout starts from the same weights.
void initialize_parameters(torch::nn::Module& module, uint64_t seed, double std, double residual_std,
                           TensorParallelPlace tp, ExpertParallelPlace ep);

}  // namespace trident
