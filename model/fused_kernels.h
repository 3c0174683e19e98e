// Fused CUDA kernels for the element-wise chains between the matrix multiplies, which LibTorch's
// composite ops run a pass per op, keeping intermediates for backward: the norms (with the
// residual add before them), SwiGLU and GELU, the rotary embedding and the loss's
// cross-entropy. Each is an autograd function that computes in fp32 and rounds once to the
// element type, and keeps for backward only what its own backward reads; the tests hold each to
// its composite path (tests/test_fused_kernels.cpp, on a GPU). model.fused_kernels chooses them
// (applies()); the CPU, fp64 and a build without the CUDA toolkit keep the composite path.
#pragma once

#include <torch/types.h>

#include <utility>

namespace trident::fused {

// Whether this build has the kernels (a CUDA LibTorch and the toolkit's compiler).
bool built();
// The major compute capability of the GPU holding `x` (9 for Hopper), or 0 when x is not on CUDA
// or this build has no kernels.
int compute_capability(const torch::Tensor& x);
// Whether the kernels take tensors like `x`: `enabled` (model.fused_kernels), built(), and x on
// CUDA in fp32, fp16 or bf16.
bool applies(const torch::Tensor& x, bool enabled);

// LayerNorm (with `bias`) or RMSNorm (`bias` undefined) of x over its last dimension; x, weight
// and bias of one element type.
torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double epsilon);
// {residual + delta, norm(residual + delta)} in one pass, both differentiable: the block's
// residual add and the next norm.
std::pair<torch::Tensor, torch::Tensor> add_norm(const torch::Tensor& residual, const torch::Tensor& delta,
                                                 const torch::Tensor& weight, const torch::Tensor& bias,
                                                 double epsilon);
// silu(gate) * up, keeping gate and up (the composite path keeps silu(gate) too).
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);
// GELU's tanh approximation.
torch::Tensor gelu(const torch::Tensor& x);
// Queries or keys [b, heads, s, d] (any strides) rotated by the tables of model/rotary.h ([s, d],
// or [b, 1, s, d] per sample, of x's element type); contiguous.
torch::Tensor rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// Per-row cross-entropy (fp32 [N]) of logits [N, V] in their own element type against targets
// [N] (int64): no fp32 copy of the logits, and backward writes their gradient in their type.
// A target outside [0, V) gives a nan loss.
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace trident::fused
