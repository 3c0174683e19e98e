// A linear layer's multiply, rows W^T + b, and gradient-accumulation fusion for its weight.
//
// With 16-bit weights the gradients accumulate in an fp32 buffer (parallel/data_parallel.h). Left
// to autograd, each micro-batch's weight gradient is a 16-bit product that a second pass reads
// and adds into the buffer: 10 bytes an element a micro-batch, on the GPU the largest cost after
// the multiplies and attention in a Llama row with 8 micro-batches. Fused (as Megatron's
// gradient_accumulation_fusion does), the weight-gradient multiply adds its fp32 result into the
// buffer as it writes it (cuBLAS, beta = 1, through LibTorch's addmm with an fp32 output where
// the LibTorch has one that adds into fp32: asked once; otherwise the 16-bit product is added in
// a pass of its own, with a warning) and the weight's .grad stays undefined. The sum is also
// closer to exact: no 16-bit rounding of each micro-batch's gradient. The CPU does the same
// arithmetic in fp32 (16-bit products are exact in fp32), so its tests see the fused path's
// numbers.
//
// The buffer's owner registers each weight whose gradient goes there (accumulate_grad_in) for as
// long as the buffer lives; a multiply of an unregistered weight is LibTorch's own.
#pragma once

#include <torch/types.h>

#include <functional>

namespace trident {

// Where a registered weight's gradient is added: the fp32 buffer's view in the weight's shape,
// asked for when the gradient is ready (a ZeRO-2 bucket's storage may come and go).
using GradTarget = std::function<torch::Tensor()>;

// From now on multiply_rows adds `weight`'s (16-bit) gradient into target() (fp32) and leaves its
// .grad alone: the hooks on its AccumulateGrad still fire, once the gradient is in, but a tensor
// hook on the weight gets an undefined gradient. A weight has one target (checked).
void accumulate_grad_in(const torch::Tensor& weight, GradTarget target);
// Back to LibTorch's multiply for `weight` (the buffer is going away).
void stop_accumulating_grad_in(const torch::Tensor& weight);

// g^T rows, the gradient of `weight` from the multiply rows W^T with output gradient g: added
// into the weight's target where it is registered (and undefined returned), else returned. For
// autograd functions that multiply by weights themselves (parallel/sequence_parallel_inputs.h).
torch::Tensor weight_gradient(const torch::Tensor& weight, const torch::Tensor& g, const torch::Tensor& rows);

// rows W^T + b for rows [N, in]: at::addmm puts the bias into the multiply (cuBLAS adds it as it
// writes the output), at::mm without one. For [b, s, h] the C++ frontend's linear would multiply,
// then add the bias in a broadcast pass of its own (on CUDA a non-vectorised kernel: 6% of the
// 1.7B row's GPU time), and at::linear folds the rows only when they are contiguous. So the rows
// go in as one matrix, whatever their strides. A registered weight's gradient goes to its target.
torch::Tensor multiply_rows(const torch::Tensor& rows, const torch::Tensor& weight, const torch::Tensor& bias);

// A product of x's rows in x's shape, its last dimension the product's.
torch::Tensor in_shape_of(const torch::Tensor& product, const torch::Tensor& x);

// x W^T + b over x's last dimension, as one multiply of its rows.
torch::Tensor linear_over_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

}  // namespace trident
