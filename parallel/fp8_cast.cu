// The FP8 cast of parallel/fp8_cast_cuda.h: one pass reads a tile of the input, writes it scaled
// and rounded, and writes the same bytes transposed through shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <stdexcept>
#include <string>

#include "parallel/fp8_cast_cuda.h"

namespace trident::cuda {
namespace {

constexpr int kTile = 32;     // a tile is kTile x kTile elements
constexpr int kTileRows = 8;  // threads per block: kTile x kTileRows, each kTile / kTileRows rows

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Tile (blockIdx.y, blockIdx.x) of x:
//
//   x [rows, cols]                 out_transposed [cols, rows]
//   +------+------+                +------+------+
//   | tile |      |   thread       | tile^T      |
//   +------+------+   (tx, ty)     +------+------+
//   reads row r0 + ty + 8k, column c0 + tx; writes row c0 + ty + 8k, column r0 + tx
// so that both the reads and the transposed writes of a warp are consecutive.
template <typename T>
__global__ void cast_tile(const T* __restrict__ x, const float* __restrict__ scale, uint8_t* __restrict__ out,
                          uint8_t* __restrict__ out_transposed, int64_t rows, int64_t cols,
                          __nv_fp8_interpretation_t format) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float s = *scale;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const uint8_t q = __nv_cvt_float_to_fp8(to_float(x[r * cols + c]) * s, __NV_SATFINITE, format);
      if (out) out[r * cols + c] = q;
      tile[i][threadIdx.x] = q;
    }
  }
  if (!out_transposed) return;
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out_transposed[c * rows + r] = tile[threadIdx.x][i];
  }
}

template <typename T>
void launch(const void* x, const float* scale, uint8_t* out, uint8_t* out_transposed, int64_t rows, int64_t cols,
            __nv_fp8_interpretation_t format, cudaStream_t stream) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  if (row_tiles > 65535 || col_tiles > (int64_t(1) << 31) - 1)
    throw std::runtime_error("the FP8 cast takes at most 65535 x 32 rows, not " + std::to_string(rows));
  const dim3 grid{unsigned(col_tiles), unsigned(row_tiles)}, block{kTile, kTileRows};
  cast_tile<T><<<grid, block, 0, stream>>>(static_cast<const T*>(x), scale, out, out_transposed, rows, cols, format);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw std::runtime_error(std::string("the FP8 cast failed to launch: ") + cudaGetErrorString(error));
}

}  // namespace

void fp8_cast(Fp8Source type, bool e5m2, const void* x, const float* scale, uint8_t* out, uint8_t* out_transposed,
              int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const __nv_fp8_interpretation_t format = e5m2 ? __NV_E5M2 : __NV_E4M3;
  switch (type) {
    case Fp8Source::f32: return launch<float>(x, scale, out, out_transposed, rows, cols, format, stream);
    case Fp8Source::f16: return launch<__half>(x, scale, out, out_transposed, rows, cols, format, stream);
    case Fp8Source::bf16: return launch<__nv_bfloat16>(x, scale, out, out_transposed, rows, cols, format, stream);
  }
}

}  // namespace trident::cuda
