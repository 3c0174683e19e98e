// The planner's time model: one iteration of a layout, built from the operations of trident's
// own model on a device profile (core/plan/device_profile.h), each term with where it comes from.
//
// One micro-batch on one pipeline stage (b sequences of s/c tokens, T = b s / c rows, TP t):
//   per layer, forward: the linear multiplies (QKV T x (a + 2g) d / t x h with g key/value
//     groups, projection T x h x h/t, MLP up T x f/t x h (and SwiGLU's gate) and down
//     T x h x f/t), attention (fused: 4 b (s/c) s h / t FLOPs, half of them masked away by
//     causality, at attention_tflops; unfused: QK^T and PV as batched multiplies per head plus
//     the softmax, mask and dropout through memory), and the memory-bound rest, in bytes per
//     element of T x h: two norms (4 each) and two residual adds (6 each, 1 more with dropout),
//     divided by t only with sequence parallelism; head reshapes (16), the activation (GELU 4,
//     SwiGLU 10 per element of f) and rotary embeddings (4 per element of q and k), divided by t;
//   backward: each multiply twice (input and weight gradients, their own shapes), fused
//     attention 2.5 times its forward, the memory-bound work twice; recomputation adds the
//     forward again (full) or the attention core (selective); unless fused, adding the 16-bit
//     weight gradients into the fp32 buffer (10 bytes per parameter);
//   the last stage adds the logits multiply (T x V/t x h) and the fp32 cross-entropy, the first
//   the embedding lookup; the slowest of the first, a middle and the last stage sets the pace
//   (each holding its layers: core/layout.h's stage_layers);
//   TP: 4 all-reduces of T h 16-bit values per layer (6 with full recomputation, more for
//   SwiGLU's two inputs) on the intra-node link at the profile's link efficiency; overlapped
//   (Software; with sequence parallelism), hidden behind the layer's multiplies but for one
//   piece in t. The slowest stage, counting its TP and CP communication, sets the pace.
// The pipeline runs M micro-batches and the bubble of (p - 1) / v stage times; point-to-point
// transfers are counted twice per micro-batch and stage boundary crossed (asynchronous, with the
// interleaved schedule: only the fill and drain's). Data-parallel gradient reduction, when the
// software overlaps it, hides behind the last micro-batch's backward except its last bucket;
// ZeRO-1 and 2 all-gather the updated weights after the step (or behind the next forward);
// ZeRO-2 and 3 reduce each micro-batch; ZeRO-3 gathers the weights twice per micro-batch behind
// the forward and the backward, the latter sharing the backward with the reduction. The
// optimizer step moves 42 bytes per parameter of the shard through memory (twice that in fp64).
// Byte counts are for 16-bit activations; fp32 and fp64 models move 2 and 4 times them.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "core/plan/device_profile.h"

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

// What the training program does, beside what the device can: each setting a technique with
// what it assumes. Presets: trident (what trident does with LibTorch 2.x), the Megatron-LM of
// 2021 that measured the A100 scaling table, Megatron-Core as of 2024-2025 and Llama 3's
// (software_named).
struct Software {
  std::string name = "trident";
  // Attention in a fused (flash) kernel at the profile's attention_tflops (LibTorch 2.x's SDPA),
  // or as matmuls with the softmax through memory (LibTorch 1.x; Megatron 2021).
  bool fused_attention = true;
  // Gradient reduction during backward (trident's buckets) or after it (Megatron 2021;
  // overlap_grad_reduce came in 2023).
  bool overlap_gradient_reduction = true;
  // Weight gradients accumulated into the fp32 buffer by their own multiply (Megatron's
  // gradient_accumulation_fusion), or, as trident does for 16-bit weights, each micro-batch's
  // 16-bit gradient added in by a hook: 10 bytes per parameter per micro-batch.
  bool fused_gradient_accumulation = false;
  // Tensor-parallel collectives cut into t pieces, each sent while the multiply it feeds or
  // follows computes on another (Megatron-Core's tp_comm_overlap, torchtitan's async TP; both
  // need sequence parallelism, whose all-gathers and reduce-scatters are what is cut): hidden up
  // to those multiplies' time, but for the one piece of t that has no multiply beside it.
  bool overlap_tensor_comm = false;
  // ZeRO-1 and 2's all-gather of the updated weights behind the next iteration's first forward,
  // layer by layer (Megatron-Core's distributed optimizer with overlap_param_gather), not after
  // the step.
  bool overlap_weight_gather = false;
  // Pipeline transfers asynchronous, behind other micro-batches' compute (Megatron-Core's
  // overlap_p2p_comm; Llama 3's asynchronous point-to-point), with the interleaved schedule
  // only, whose other chunks give them work to hide behind: only the pipeline's fill and drain
  // wait for them.
  bool overlap_pipeline_comm = false;
};
Software trident_software();
Software megatron_2021_software();
Software megatron_core_software();
// Meta's stack as Dubey et al. 2024 describe it for Llama 3: fused attention, FSDP's gradient
// reduction and weight gathering behind the computation, asynchronous pipeline transfers;
// tensor-parallel collectives not overlapped (the paper describes no such overlap), gradients
// accumulated by PyTorch's autograd (not fused).
Software llama3_software();
// Every preset, and the one with this name (nullptr for none).
const std::vector<Software>& software_presets();
const Software* software_named(const std::string& name);
// "fused attention, gradient reduction overlapped, ...": what a preset assumes, for plans.
std::string describe_software(const Software& software);

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

}  // namespace trident
