// The CUDA launchers behind model/fused_kernels.h: raw pointers, sizes and a stream, so that the
// .cu file needs no LibTorch header (nvcc compiles it in seconds). Every tensor is contiguous
// unless a stride is passed; sums and statistics are fp32 whatever the element type.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trident::cuda {

enum class Element { f32, f16, bf16 };

// Normalisation of `rows` rows of `hidden` (LayerNorm when `bias` is not null or `centered`,
// else RMSNorm): y = w * (x - mean) * rstd + b, or y = w * x * rstd. With `delta`, x is first
// `input + delta`, rounded to the element type and written to `sum`. Writes mean (LayerNorm) and
// rstd per row, fp32.
void norm_forward(Element type, bool centered, const void* input, const void* delta, const void* weight,
                  const void* bias, void* sum, void* y, float* mean, float* rstd, int64_t rows, int64_t hidden,
                  float epsilon, cudaStream_t stream);
// Its backward for x (the sum when there was a delta), given dy: dx, plus `dsum` (the gradient
// that reaches the sum by the residual path) when not null; partial weight (and bias) gradients
// per block into `partial_dw` / `partial_db` [norm_partial_blocks(rows), hidden] fp32, which the
// caller sums over the first dimension.
void norm_backward(Element type, bool centered, const void* dy, const void* x, const void* weight, const float* mean,
                   const float* rstd, const void* dsum, void* dx, float* partial_dw, float* partial_db, int64_t rows,
                   int64_t hidden, cudaStream_t stream);
int64_t norm_partial_blocks(int64_t rows);

// SwiGLU: y = silu(gate) * up, and its backward (dgate, dup from dy).
void swiglu_forward(Element type, const void* gate, const void* up, void* y, int64_t n, cudaStream_t stream);
void swiglu_backward(Element type, const void* dy, const void* gate, const void* up, void* dgate, void* dup, int64_t n,
                     cudaStream_t stream);
// GELU's tanh approximation and its backward.
void gelu_forward(Element type, const void* x, void* y, int64_t n, cudaStream_t stream);
void gelu_backward(Element type, const void* dy, const void* x, void* dx, int64_t n, cudaStream_t stream);

// Rotary embedding of x [b, heads, s, d] (any strides, in elements) into a contiguous y, by
// tables cos and sin of the element type indexed [b, s, d] by their strides (a b stride of 0
// when every sample shares them; d contiguous). `inverse` applies the transposed rotation (the
// backward).
struct Strides4 {
  int64_t size[4], stride[4];
};
void rotary(Element type, const void* x, Strides4 x_shape, const void* cos, const void* sin, int64_t table_stride_b,
            int64_t table_stride_s, void* y, bool inverse, cudaStream_t stream);

// Cross-entropy of `rows` rows of `vocab` logits against int64 targets, fp32 inside: losses
// and the log-sum-exp per row (fp32). Backward: dlogits = dloss * (softmax - onehot) in the
// logits' type.
void cross_entropy_forward(Element type, const void* logits, const int64_t* targets, float* losses, float* lse,
                           int64_t rows, int64_t vocab, cudaStream_t stream);
void cross_entropy_backward(Element type, const float* dlosses, const void* logits, const int64_t* targets,
                            const float* lse, void* dlogits, int64_t rows, int64_t vocab, cudaStream_t stream);

}  // namespace trident::cuda
