// FP8 multiplies for the linear layers (precision=fp8): each of a linear layer's three
// multiplies (the output, the input's gradient, the weight's gradient) takes 8-bit operands, one
// scale per tensor from that tensor's largest magnitude at the time ("current" or "dynamic"
// scaling, as torchao's float8 training and Transformer Engine's current scaling do). Inputs and
// weights are e4m3 (3 mantissa bits, up to 448), output gradients e5m2 (2 mantissa bits, up to
// 57344: the range gradients need); each product accumulates in fp32 and is written in the
// operands' 16-bit type. A tensor x is quantised as
//
//   scale = max_of_format / amax(x)     q = round_nearest_even(clamp(x * scale, -max, max))
//
// and the multiply undoes the two scales (LibTorch's at::_scaled_mm). Hopper's FP8 tensor cores
// take only the TN layout (both operands' inner dimension contiguous), so the weight gradient
// needs the output gradient and the input transposed: the casts write the transposed copies in
// the same pass, and backward keeps only the input's transposed 8-bit copy (a byte per element
// where the 16-bit path keeps two). The weight is cast again in backward from its saved scale
// rather than kept: a pipeline keeps several micro-batches in flight.
#pragma once

#include <torch/types.h>

#include <vector>

namespace trident::fp8 {

enum class Format { e4m3, e5m2 };

// Whether this LibTorch has 8-bit floats and the scaled multiply (2.x; not 1.13).
bool built();
// Whether the casts run in one CUDA kernel (a CUDA build, x on the GPU) rather than LibTorch's ops.
bool cast_kernel_applies(const torch::Tensor& x);

// A 2-D tensor quantised with one scale: `rows` (as x) and/or `transposed` (x^T, contiguous),
// each defined when asked for; `scale` is max / amax and `inverse_scale` its reciprocal, the
// factor the multiply undoes it by (fp32, 0-dim, on x's device).
struct Quantised {
  torch::Tensor rows, transposed, scale, inverse_scale;
};
// x [R, C] quantised with the scale of its own amax.
Quantised quantise(const torch::Tensor& x, Format format, bool rows, bool transposed);
// x quantised with a given scale (a weight cast again in backward with its forward's scale).
Quantised quantise_with(const torch::Tensor& x, const torch::Tensor& scale, Format format, bool rows, bool transposed);

// x W^T + b over x's last dimension with the three multiplies in FP8; the weight's and bias'
// gradients in their own types. Sizes of the multiplies (x's rows, in, out) must be multiples of
// 16 (cuBLAS's FP8 kernels): the error names them otherwise.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// Linear layers that take the same x (SwiGLU's gate and up): x W_i^T + b_i for each weight, x cast
// once and its transposed 8-bit copy kept once for all the weights' gradients. `biases`: one per
// weight, or none.
std::vector<torch::Tensor> linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                   const std::vector<torch::Tensor>& biases);

}  // namespace trident::fp8
