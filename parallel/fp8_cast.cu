// The FP8 cast of parallel/fp8_cast_cuda.h: one pass reads a tile of the input, writes it scaled
// and rounded, and writes the same bytes transposed through shared memory. Where both sizes are
// multiples of 8 (every FP8 multiply's operands: multiples of 16) each thread moves 8 elements at
// once (16-byte loads of 16-bit input, 8-byte stores); other shapes take an element per thread.
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

constexpr int kWideTile = 64;                      // the wide path's tile: kWideTile x kWideTile
constexpr int kChunk = 8;                          // elements a thread moves at once
constexpr int kChunksPerRow = kWideTile / kChunk;  // threads across a tile row
constexpr int kWideThreads = 256;                  // threads per block
constexpr int kRowsPerPass = kWideThreads / kChunksPerRow;

// kChunk 8-bit values, written and read as one 8-byte word.
union Chunk {
  uint8_t bytes[kChunk];
  uint2 packed;
};

// kChunk consecutive elements of T (16- or 32-byte aligned) as floats, in 16-byte loads.
template <typename T>
__device__ __forceinline__ void load_chunk(const T* __restrict__ p, float (&v)[kChunk]) {
  constexpr int kLoads = kChunk * sizeof(T) / sizeof(uint4);  // 1 for 16-bit types, 2 for fp32
  uint4 raw[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) raw[k] = reinterpret_cast<const uint4*>(p)[k];
  const T* element = reinterpret_cast<const T*>(raw);
#pragma unroll
  for (int k = 0; k < kChunk; ++k) v[k] = to_float(element[k]);
}

// Tile (blockIdx.y, blockIdx.x) of x, rows and cols multiples of kChunk (so a chunk is wholly in
// or out):
//
//   x [rows, cols]: thread t takes row r0 + t / 8 + 32k, columns c0 + 8 (t % 8) .. + 7
//   out_transposed [cols, rows]: row c0 + t / 8 + 32k, columns r0 + 8 (t % 8) .. + 7, its
//   8 bytes read down a column of the shared tile
template <typename T>
__global__ void __launch_bounds__(kWideThreads)
    cast_tile_wide(const T* __restrict__ x, const float* __restrict__ scale, uint8_t* __restrict__ out,
                   uint8_t* __restrict__ out_transposed, int64_t rows, int64_t cols, __nv_fp8_interpretation_t format) {
  __shared__ __align__(8) uint8_t tile[kWideTile][kWideTile + kChunk];
  const float s = *scale;
  const int64_t r0 = int64_t(blockIdx.y) * kWideTile, c0 = int64_t(blockIdx.x) * kWideTile;
  const int first = threadIdx.x / kChunksPerRow, offset = (threadIdx.x % kChunksPerRow) * kChunk;
  for (int i = first; i < kWideTile; i += kRowsPerPass) {
    const int64_t r = r0 + i, c = c0 + offset;
    if (r < rows && c < cols) {
      float v[kChunk];
      load_chunk(x + r * cols + c, v);
      Chunk q;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) q.bytes[k] = __nv_cvt_float_to_fp8(v[k] * s, __NV_SATFINITE, format);
      if (out) *reinterpret_cast<uint2*>(out + r * cols + c) = q.packed;
      *reinterpret_cast<uint2*>(&tile[i][offset]) = q.packed;
    }
  }
  if (!out_transposed) return;
  __syncthreads();
  for (int i = first; i < kWideTile; i += kRowsPerPass) {
    const int64_t c = c0 + i, r = r0 + offset;
    if (r < rows && c < cols) {
      Chunk q;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) q.bytes[k] = tile[offset + k][i];
      *reinterpret_cast<uint2*>(out_transposed + c * rows + r) = q.packed;
    }
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename T>
void launch(const void* x, const float* scale, uint8_t* out, uint8_t* out_transposed, int64_t rows, int64_t cols,
            __nv_fp8_interpretation_t format, cudaStream_t stream) {
  const bool wide =
      rows % kChunk == 0 && cols % kChunk == 0 && aligned(x, 16) && aligned(out, 8) && aligned(out_transposed, 8);
  const int64_t tile = wide ? kWideTile : kTile;
  const int64_t row_tiles = (rows + tile - 1) / tile, col_tiles = (cols + tile - 1) / tile;
  if (row_tiles > 65535 || col_tiles > (int64_t(1) << 31) - 1)
    throw std::runtime_error("the FP8 cast takes at most 65535 x " + std::to_string(tile) + " rows, not " +
                             std::to_string(rows));
  const dim3 grid{unsigned(col_tiles), unsigned(row_tiles)};
  if (wide)
    cast_tile_wide<T>
        <<<grid, kWideThreads, 0, stream>>>(static_cast<const T*>(x), scale, out, out_transposed, rows, cols, format);
  else
    cast_tile<T><<<grid, dim3{kTile, kTileRows}, 0, stream>>>(static_cast<const T*>(x), scale, out, out_transposed,
                                                              rows, cols, format);
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
