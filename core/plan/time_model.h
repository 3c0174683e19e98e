// The planner's time model: one iteration of a layout, built from the operations of trident's
// own model on a device profile (core/plan/device_profile.h), each term with where it comes from.
//
// One micro-batch on one pipeline stage (b sequences of s/c tokens, T = b s / c rows, TP t):
//   per layer, forward: the linear multiplies (QKV T x (a + 2g) d / t x h with g key/value
//     groups, projection T x h x h/t, MLP up T x f/t x h (and SwiGLU's gate) and down
//     T x h x f/t), attention (fused: 4 b (s/c) s h / t FLOPs, half of them masked away by
//     causality, at the kernel's rate for its block's keys and head size (attention_rate_share);
//     unfused: QK^T and PV as batched multiplies per head plus the softmax, mask and dropout
//     through memory), and the memory-bound rest, in bytes per element of T x h: two norms (4
//     each; an eager RMSNorm 12) and two residual adds (6 each, 1 more with dropout), divided by
//     t only with sequence parallelism; head reshapes (16), the activation (GELU 4, SwiGLU 10 per
//     element of f, fused 6) and rotary embeddings (4 per element of q and k fused, 12 eager),
//     divided by t; in FP8 (core/plan/software.h) the linear multiplies at the FP8 rate after
//     casting their inputs (4 bytes per element: the cast writes the transpose too);
//   backward: each multiply twice (input and weight gradients, their own shapes), fused
//     attention 2.5 times its forward, the memory-bound work twice; recomputation adds the
//     forward again (full) or what the software's selective policy re-runs (the attention core;
//     per op, the memory-bound work and half the multiplies; or one layer in n whole); unless
//     fused, adding the 16-bit weight gradients into the fp32 buffer (10 bytes per parameter);
//   the last stage adds the logits multiply (T x V/t x h) and the cross-entropy (fp32 or fused), the first
//   the embedding lookup; the slowest of the first, a middle and the last stage sets the pace
//   (each holding its layers: core/layout.h's stage_layers);
//   TP: 4 all-reduces of T h 16-bit values per layer (6 with full recomputation, more for
//   SwiGLU's two inputs; in FP8 the all-gathers' half moves a byte per value) on the intra-node
//   link at the profile's link efficiency; overlapped (with sequence parallelism), hidden behind
//   the layer's multiplies but for one piece in t, the multiplies run as t pieces. The slowest
//   stage, counting its TP and CP communication, sets the pace.
// Whatever is overlapped costs the computation beside it the profile's overlap_contention of
// the hidden time (SMs and memory bandwidth the collectives take); data-parallel collectives
// from registered buffers (Software::registered_buffers) only the memory bandwidth they move.
// The pipeline runs M micro-batches and the bubble of (p - 1) / v stage times; point-to-point
// transfers are counted twice per micro-batch and stage boundary crossed (asynchronous, with the
// interleaved schedule: only the fill and drain's). Data-parallel gradient reduction, when the
// software overlaps it, hides behind the last micro-batch's backward except its last bucket;
// ZeRO-1 and 2 all-gather the updated weights after the step (or behind the next forward);
// ZeRO-2 and 3 reduce each micro-batch; ZeRO-3 gathers the weights twice per micro-batch behind
// the forward and the backward, the latter sharing the backward with the reduction, the first
// block's forward gather with nothing before it to hide behind. The
// optimizer step moves 42 bytes per parameter of the shard through memory (twice that in fp64).
// Byte counts are for 16-bit activations; fp32 and fp64 models move 2 and 4 times them.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "core/plan/device_profile.h"
#include "core/plan/software.h"

namespace trident {

// C[m x n] = A[m x k] B[k x n] in 16 bits, `batch` of them in one kernel (their tiles share
// the waves).
struct GemmShape {
  double m = 0, n = 0, k = 0, batch = 1;
};
// Seconds of one (batched) multiply on `device`: quantized FLOPs at matmul_tflops, or its bytes
// through memory when that takes longer.
double gemm_seconds(const GemmShape& shape, const DeviceProfile& device);
// The share of the multiply's FLOPs that tile and wave quantization leave useful (1: none wasted).
double quantization_efficiency(const GemmShape& shape, const DeviceProfile& device);
// Seconds to move `bytes` through memory at the achieved bandwidth.
double memory_seconds(double bytes, const DeviceProfile& device);
// The share of a flash kernel's rate FlashAttention 1 and 2023's Triton flash kernels reach, set
// from llm-foundry's MPT 1B run at sequence 32768 on 8 H100s (docs/planning.md); and a
// memory-efficient kernel (xformers' CUTLASS kernel against FlashAttention-2's published A100
// rates; stated, not measured here).
constexpr double kFlash1Share = 0.65, kMemoryEfficientShare = 0.6;
// What each ring attention step after the first costs beyond its block's attention when the
// blocks are merged eagerly (software ring_blocks=eager): set from torchtitan's 8B run at CP 8
// (docs/planning.md, where the held-out CP runs check it).
constexpr double kEagerRingStepShare = 0.33;
// The share of the 16-bit tensor-core rate fp32 multiplies reach without TF32 (LibTorch's
// default), for trident's ring attention: an A100's 19.5 TFLOP/s against 312, an H100's 67 against
// 989 (NVIDIA's datasheets; not measured here).
constexpr double kFp32MultiplyShare = 1.0 / 16;
// The share of the profile's attention_tflops a flash kernel reaches on blocks of `keys` keys per
// query (causal) at head size `head_dim`: s / (s + 512) for the work per query block against its
// fixed costs (loading the queries, writing the output, the diagonal's masked half), and
// d / (d + 20) for the softmax's work per score against the d multiply-adds of each, both
// relative to long sequences at head size 128: 80% of the long-sequence rate at 2048, 50% at
// 512, head size 64 at 88% of 128's (FlashAttention-2's published A100 curves: about 82%, 52%
// and 88%).
double attention_rate_share(double keys, double head_dim);

struct IterationTime {
  double compute_s = 0, bubble_s = 0, tensor_comm_s = 0, context_comm_s = 0, expert_comm_s = 0, data_comm_s = 0,
         pipeline_comm_s = 0, optimizer_s = 0;
  double seconds() const {
    return compute_s + bubble_s + tensor_comm_s + context_comm_s + expert_comm_s + data_comm_s + pipeline_comm_s +
           optimizer_s;
  }
  // "name  seconds  what it counts", one line per term, for plan --explain.
  std::vector<std::string> explanation;
};

// `software` as a run of the config uses it (as_run: precision=fp8 multiplies in FP8,
// model.fused_kernels=false runs the composite path).
IterationTime estimate_iteration_time(const Config& config, const Layout& layout, const DeviceProfile& device,
                                      const Software& software = trident_software());

// Shapes the device computes badly and batches that starve the pipeline, each with its
// estimated cost: a transformer layer's multiplies losing more than 5% to tile and wave
// quantization, dimensions that are not multiples of the tensor cores' alignment (hidden and
// FFN per TP rank, head size, vocabulary per TP rank, micro-batch x sequence), and fewer than
// 4 micro-batches per pipeline stage (NVIDIA's and the seeds' advice; core/plan/device_profile.h).
std::vector<std::string> efficiency_warnings(const Config& config, const Layout& layout, const DeviceProfile& device);

// The one-time warning of a run whose measured TFLOP/s per GPU stay under half the time
// model's estimate for its layout on `device` (empty when they do not): something is wrong with
// the model or hardware configuration, as seed 002 puts it for under 115 TFLOP/s on an A100.
std::string throughput_warning(double measured_tflops, double estimated_tflops, const std::string& device);
// The log's line, at the start of a run on a device the time model has a profile for, of what it
// expects of the run's layout: the job's tokens/s and the model TFLOP/s per GPU, as the
// iterations log them.
std::string throughput_expectation(double tokens_per_s, double tflops, const std::string& device);

}  // namespace trident
