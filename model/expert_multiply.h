// The experts' multiplies: rows grouped by expert through each expert's own matrix. On a Hopper
// GPU in bf16, where this LibTorch has it (at::_grouped_mm, PyTorch 2.8 and later), one grouped
// multiply for all of a rank's experts, as Megatron-Core's grouped GEMM and torchtitan do;
// elsewhere (the CPU, other GPUs and types, LibTorch 1.13, model.fused_kernels=false) a multiply
// per expert. Both paths give the same rows (tests/test_fused_kernels.cpp holds the grouped one to
// the loop on a GPU).
#pragma once

#include <torch/types.h>

#include <vector>

namespace trident {

// Whether this LibTorch has the grouped multiply.
bool grouped_multiply_built();

// x [m, in] in runs of counts[e] rows (sum = m), weights [E, out, in] (counts.size() = E) ->
// [m, out], run e multiplied by weights[e]^T. Grouped when `grouped` and the tensors allow it
// (compute capability 9, bf16, in and out multiples of 8). Differentiable.
torch::Tensor expert_multiply(const torch::Tensor& x, const torch::Tensor& weights, const std::vector<int64_t>& counts,
                              bool grouped);

}  // namespace trident
