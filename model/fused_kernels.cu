// The fused kernels of model/fused_kernels_cuda.h. Each reads its inputs once (a row twice or
// three times where it stays in the cache) and computes in fp32, rounding to the element type
// once, where LibTorch's composite ops make a pass per op and keep the intermediates.
#include "model/fused_kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace trident::cuda {
namespace {

constexpr int kThreads = 256;  // per block, a multiple of the warp

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// v as the element type holds it.
template <typename T>
__device__ __forceinline__ float rounded(float v) { return to_float(from_float<T>(v)); }

// The sum of every thread's v, returned to all of them. `shared` holds a float per warp.
__device__ float block_sum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // an earlier call's readers are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Running maximum and sum of exp(x - maximum), merged (for a log-sum-exp in one pass).
struct MaxSum {
  float max, sum;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

__device__ MaxSum block_max_sum(MaxSum v, MaxSum* shared) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = merge(v, {__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)});
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : MaxSum{-INFINITY, 0.f};
  for (int offset = 16; offset > 0; offset >>= 1)
    v = merge(v, {__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)});
  return v;
}

void check_launch(const char* kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw std::runtime_error(std::string("the fused CUDA kernel ") + kernel + " failed to launch: " +
                             cudaGetErrorString(error));
}

// Blocks for an element-wise kernel over n elements (grid-stride loops do the rest).
unsigned elementwise_blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

#define TRIDENT_DISPATCH(type, ...)         \
  switch (type) {                           \
    case Element::f32: {                    \
      using T = float;                      \
      __VA_ARGS__;                          \
    } break;                                \
    case Element::f16: {                    \
      using T = __half;                     \
      __VA_ARGS__;                          \
    } break;                                \
    case Element::bf16: {                   \
      using T = __nv_bfloat16;              \
      __VA_ARGS__;                          \
    } break;                                \
  }

// ---- normalisation: one block per row ----

template <typename T>
__global__ void norm_forward_kernel(bool centered, const T* input, const T* delta, const T* weight, const T* bias,
                                    T* sum, T* y, float* mean_out, float* rstd_out, int64_t hidden, float epsilon) {
  __shared__ float shared[32];
  const int64_t offset = int64_t(blockIdx.x) * hidden;
  const T* x = delta ? sum + offset : input + offset;  // the row to normalise, once the sum is written
  float total = 0.f, squares = 0.f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = to_float(input[offset + i]);
    if (delta) {
      v = rounded<T>(v + to_float(delta[offset + i]));
      sum[offset + i] = from_float<T>(v);  // read back below by this same thread
    }
    total += v;
    squares += v * v;
  }
  float mean = 0.f, variance;
  if (centered) {
    mean = block_sum(total, shared) / float(hidden);
    float deviations = 0.f;  // a second pass, as accurate as Welford's for a row in the cache
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float d = to_float(x[i]) - mean;
      deviations += d * d;
    }
    variance = block_sum(deviations, shared) / float(hidden);
  } else {
    variance = block_sum(squares, shared) / float(hidden);  // the mean square
  }
  const float rstd = rsqrtf(variance + epsilon);
  if (threadIdx.x == 0) {
    if (centered) mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = (to_float(x[i]) - mean) * rstd * to_float(weight[i]);
    if (bias) v += to_float(bias[i]);
    y[offset + i] = from_float<T>(v);
  }
}

// Rows r = blockIdx.x, blockIdx.x + gridDim.x, ...; each thread keeps to the columns
// threadIdx.x + k * blockDim.x, so its block's partial weight gradients need no atomics.
template <typename T>
__global__ void norm_backward_kernel(bool centered, const T* dy, const T* x, const T* weight, const float* mean,
                                     const float* rstd, const T* dsum, T* dx, float* partial_dw, float* partial_db,
                                     int64_t rows, int64_t hidden) {
  __shared__ float shared[32];
  float* dw = partial_dw + int64_t(blockIdx.x) * hidden;
  float* db = partial_db ? partial_db + int64_t(blockIdx.x) * hidden : nullptr;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t offset = row * hidden;
    const float mu = centered ? mean[row] : 0.f, r = rstd[row];
    float g_total = 0.f, gn_total = 0.f;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float n = (to_float(x[offset + i]) - mu) * r, d = to_float(dy[offset + i]);
      const float g = d * to_float(weight[i]);
      g_total += g;
      gn_total += g * n;
      dw[i] += d * n;
      if (db) db[i] += d;
    }
    const float g_mean = centered ? block_sum(g_total, shared) / float(hidden) : 0.f;
    const float gn_mean = block_sum(gn_total, shared) / float(hidden);
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float n = (to_float(x[offset + i]) - mu) * r;
      const float g = to_float(dy[offset + i]) * to_float(weight[i]);
      float v = r * (g - g_mean - n * gn_mean);
      if (dsum) v += to_float(dsum[offset + i]);
      dx[offset + i] = from_float<T>(v);
    }
  }
}

// ---- activations: element-wise ----

// K pointers, by value into a kernel.
template <typename P, int K>
struct Pointers {
  P at[K];
};

// N elements of T in one aligned load or store (16 bytes for N = 16 / sizeof(T)).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// out_k[i] = op(in_0[i], ...)_k for i < n, computed in fp32. Each thread takes N consecutive
// elements at a time through Pack loads and stores (N > 1 only when every pointer is aligned for
// it); the last n % N elements one by one.
template <typename T, int N, int In, int Out, typename Op>
__global__ void map_kernel(Op op, Pointers<const T*, In> in, Pointers<T*, Out> out, int64_t n) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t packs = n / N;
  for (int64_t p = first; p < packs; p += step) {
    Pack<T, N> a[In], b[Out];
    for (int k = 0; k < In; ++k) a[k] = reinterpret_cast<const Pack<T, N>*>(in.at[k])[p];
    for (int j = 0; j < N; ++j) {
      float x[In], y[Out];
      for (int k = 0; k < In; ++k) x[k] = to_float(a[k].v[j]);
      op(x, y);
      for (int k = 0; k < Out; ++k) b[k].v[j] = from_float<T>(y[k]);
    }
    for (int k = 0; k < Out; ++k) reinterpret_cast<Pack<T, N>*>(out.at[k])[p] = b[k];
  }
  for (int64_t i = packs * N + first; i < n; i += step) {
    float x[In], y[Out];
    for (int k = 0; k < In; ++k) x[k] = to_float(in.at[k][i]);
    op(x, y);
    for (int k = 0; k < Out; ++k) out.at[k][i] = from_float<T>(y[k]);
  }
}

template <typename T, int In, int Out, typename Op>
void launch_map(const char* name, Op op, Pointers<const void*, In> in, Pointers<void*, Out> out, int64_t n,
                cudaStream_t stream) {
  constexpr int kPack = 16 / sizeof(T);
  Pointers<const T*, In> typed_in;
  Pointers<T*, Out> typed_out;
  bool aligned = true;
  for (int k = 0; k < In; ++k) {
    typed_in.at[k] = static_cast<const T*>(in.at[k]);
    aligned = aligned && reinterpret_cast<uintptr_t>(in.at[k]) % 16 == 0;
  }
  for (int k = 0; k < Out; ++k) {
    typed_out.at[k] = static_cast<T*>(out.at[k]);
    aligned = aligned && reinterpret_cast<uintptr_t>(out.at[k]) % 16 == 0;
  }
  if (aligned)
    map_kernel<T, kPack><<<elementwise_blocks((n + kPack - 1) / kPack), kThreads, 0, stream>>>(op, typed_in, typed_out, n);
  else
    map_kernel<T, 1><<<elementwise_blocks(n), kThreads, 0, stream>>>(op, typed_in, typed_out, n);
  check_launch(name);
}

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

struct SwigluForward {  // gate, up -> y
  __device__ void operator()(const float* x, float* y) const { y[0] = x[0] * sigmoid(x[0]) * x[1]; }
};

struct SwigluBackward {  // dy, gate, up -> dgate, dup
  __device__ void operator()(const float* x, float* y) const {
    const float d = x[0], g = x[1], u = x[2], s = sigmoid(g);
    y[0] = d * u * s * (1.f + g * (1.f - s));  // silu'(g) = s (1 + g (1 - s))
    y[1] = d * g * s;
  }
};

// gelu(x) = x/2 (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi)
constexpr float kGeluC = 0.7978845608028654f, kGeluA = 0.044715f;

struct GeluForward {  // x -> y
  __device__ void operator()(const float* x, float* y) const {
    const float v = x[0];
    y[0] = 0.5f * v * (1.f + tanhf(kGeluC * (v + kGeluA * v * v * v)));
  }
};

struct GeluBackward {  // dy, x -> dx
  __device__ void operator()(const float* x, float* y) const {
    const float v = x[1], t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    y[0] = x[0] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kGeluC * (1.f + 3.f * kGeluA * v * v));
  }
};

// ---- rotary embedding: a thread per pair of channels (j, j + d/2) ----

template <typename T>
__global__ void rotary_kernel(const T* x, Strides4 shape, const T* cos, const T* sin, int64_t table_b,
                              int64_t table_s, T* y, bool inverse) {
  const int64_t half = shape.size[3] / 2, seq = shape.size[2], heads = shape.size[1];
  const int64_t pairs = shape.size[0] * heads * seq * half;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    //  p = ((b * heads + h) * seq + s) * half + j
    const int64_t j = p % half, s = (p / half) % seq, h = (p / half / seq) % heads, b = p / half / seq / heads;
    const int64_t in = b * shape.stride[0] + h * shape.stride[1] + s * shape.stride[2] + j * shape.stride[3];
    const float x1 = to_float(x[in]), x2 = to_float(x[in + half * shape.stride[3]]);
    const int64_t t = b * table_b + s * table_s + j;
    const float c1 = to_float(cos[t]), c2 = to_float(cos[t + half]), s1 = to_float(sin[t]), s2 = to_float(sin[t + half]);
    const int64_t out = ((b * heads + h) * seq + s) * 2 * half + j;
    // forward [x1 c1 - x2 s1, x2 c2 + x1 s2]; its transpose [x1 c1 + x2 s2, x2 c2 - x1 s1]
    y[out] = from_float<T>(inverse ? x1 * c1 + x2 * s2 : x1 * c1 - x2 * s1);
    y[out + half] = from_float<T>(inverse ? x2 * c2 - x1 * s1 : x2 * c2 + x1 * s2);
  }
}

// ---- cross-entropy: one block per row ----

template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const int64_t* targets, float* losses, float* lse_out,
                                             int64_t vocab) {
  __shared__ MaxSum shared[32];
  const T* row = logits + int64_t(blockIdx.x) * vocab;
  MaxSum mine{-INFINITY, 0.f};
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = to_float(row[i]);
    if (v == -INFINITY) continue;
    if (!(v <= mine.max)) {  // a larger value, or a nan, which then stays in max and sum
      mine.sum = mine.sum * __expf(mine.max - v) + 1.f;
      mine.max = v;
    } else {
      mine.sum += __expf(v - mine.max);
    }
  }
  const MaxSum all = block_max_sum(mine, shared);
  if (threadIdx.x == 0) {
    const float lse = all.max + logf(all.sum);
    const int64_t target = targets[blockIdx.x];
    lse_out[blockIdx.x] = lse;
    losses[blockIdx.x] = target >= 0 && target < vocab ? lse - to_float(row[target]) : NAN;
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const float* dlosses, const T* logits, const int64_t* targets,
                                              const float* lse, T* dlogits, int64_t vocab) {
  const int64_t offset = int64_t(blockIdx.x) * vocab, target = targets[blockIdx.x];
  const float d = dlosses[blockIdx.x], l = lse[blockIdx.x];
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float p = __expf(to_float(logits[offset + i]) - l);
    dlogits[offset + i] = from_float<T>(d * (i == target ? p - 1.f : p));
  }
}

}  // namespace

void norm_forward(Element type, bool centered, const void* input, const void* delta, const void* weight,
                  const void* bias, void* sum, void* y, float* mean, float* rstd, int64_t rows, int64_t hidden,
                  float epsilon, cudaStream_t stream) {
  if (rows == 0) return;
  TRIDENT_DISPATCH(type, norm_forward_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(
                             centered, static_cast<const T*>(input), static_cast<const T*>(delta),
                             static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<T*>(sum),
                             static_cast<T*>(y), mean, rstd, hidden, epsilon));
  check_launch("norm_forward");
}

int64_t norm_partial_blocks(int64_t rows) { return rows < 512 ? (rows > 0 ? rows : 1) : 512; }

void norm_backward(Element type, bool centered, const void* dy, const void* x, const void* weight, const float* mean,
                   const float* rstd, const void* dsum, void* dx, float* partial_dw, float* partial_db, int64_t rows,
                   int64_t hidden, cudaStream_t stream) {
  if (rows == 0) return;
  TRIDENT_DISPATCH(type, norm_backward_kernel<T><<<unsigned(norm_partial_blocks(rows)), kThreads, 0, stream>>>(
                             centered, static_cast<const T*>(dy), static_cast<const T*>(x),
                             static_cast<const T*>(weight), mean, rstd, static_cast<const T*>(dsum),
                             static_cast<T*>(dx), partial_dw, partial_db, rows, hidden));
  check_launch("norm_backward");
}

void swiglu_forward(Element type, const void* gate, const void* up, void* y, int64_t n, cudaStream_t stream) {
  TRIDENT_DISPATCH(type, launch_map<T, 2, 1>("swiglu_forward", SwigluForward{}, {gate, up}, {y}, n, stream));
}

void swiglu_backward(Element type, const void* dy, const void* gate, const void* up, void* dgate, void* dup, int64_t n,
                     cudaStream_t stream) {
  TRIDENT_DISPATCH(type,
                   launch_map<T, 3, 2>("swiglu_backward", SwigluBackward{}, {dy, gate, up}, {dgate, dup}, n, stream));
}

void gelu_forward(Element type, const void* x, void* y, int64_t n, cudaStream_t stream) {
  TRIDENT_DISPATCH(type, launch_map<T, 1, 1>("gelu_forward", GeluForward{}, {x}, {y}, n, stream));
}

void gelu_backward(Element type, const void* dy, const void* x, void* dx, int64_t n, cudaStream_t stream) {
  TRIDENT_DISPATCH(type, launch_map<T, 2, 1>("gelu_backward", GeluBackward{}, {dy, x}, {dx}, n, stream));
}

void rotary(Element type, const void* x, Strides4 x_shape, const void* cos, const void* sin, int64_t table_stride_b,
            int64_t table_stride_s, void* y, bool inverse, cudaStream_t stream) {
  const int64_t pairs = x_shape.size[0] * x_shape.size[1] * x_shape.size[2] * (x_shape.size[3] / 2);
  TRIDENT_DISPATCH(type, rotary_kernel<T><<<elementwise_blocks(pairs), kThreads, 0, stream>>>(
                             static_cast<const T*>(x), x_shape, static_cast<const T*>(cos),
                             static_cast<const T*>(sin), table_stride_b, table_stride_s, static_cast<T*>(y), inverse));
  check_launch("rotary");
}

void cross_entropy_forward(Element type, const void* logits, const int64_t* targets, float* losses, float* lse,
                           int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return;
  TRIDENT_DISPATCH(type, cross_entropy_forward_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(
                             static_cast<const T*>(logits), targets, losses, lse, vocab));
  check_launch("cross_entropy_forward");
}

void cross_entropy_backward(Element type, const float* dlosses, const void* logits, const int64_t* targets,
                            const float* lse, void* dlogits, int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return;
  TRIDENT_DISPATCH(type, cross_entropy_backward_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(
                             dlosses, static_cast<const T*>(logits), targets, lse, static_cast<T*>(dlogits), vocab));
  check_launch("cross_entropy_backward");
}

}  // namespace trident::cuda
