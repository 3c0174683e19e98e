// The CUDA cast behind parallel/fp8_multiply.h: raw pointers, sizes and a stream, so that the .cu
// file needs no LibTorch header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trident::cuda {

enum class Fp8Source { f32, f16, bf16 };

// x [rows, cols] (contiguous) times *scale (fp32, on the GPU), rounded to the nearest e4m3
// (`e5m2` false) or e5m2 value with saturation at the format's largest finite value; written
// to `out` [rows, cols] and/or `out_transposed` [cols, rows] (either may be null), one byte each.
void fp8_cast(Fp8Source type, bool e5m2, const void* x, const float* scale, uint8_t* out, uint8_t* out_transposed,
              int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace trident::cuda
