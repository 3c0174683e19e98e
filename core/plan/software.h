// What the training program does, beside what the device can (core/plan/device_profile.h): each
// setting a technique with what it assumes, for the time and memory models. Presets name the
// stacks whose runs the planner is checked on; `software.KEY=VALUE` settings change one thing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace trident {

// How attention runs: a flash kernel (FlashAttention 2/3, cuDNN's; LibTorch 2.x SDPA picks one)
// at the profile's attention rate for its sequence and head size; FlashAttention 1 or a Triton
// flash kernel of 2023 (llm-foundry's), or a memory-efficient kernel (xformers' CUTLASS one,
// SDPA's fallback), each at a share of that (core/plan/time_model.h); or the plain multiplies
// with the softmax through memory (math: LibTorch 1.x, Megatron 2021).
enum class AttentionKernel { flash, flash1, memory_efficient, math };

// What a layout's recompute=selective keeps and recomputes:
//   attention: the attention core (scores, softmax, dropout) recomputed (Megatron's selective,
//     trident's);
//   op: each layer's activations recomputed but for its attention output and every other matmul
//     output, kept (torchtitan's per-op policy);
//   layers: every n-th layer (recompute_layer_every) recomputed whole, the others keep
//     everything (torchtitan's per-layer policy).
enum class SelectiveRecompute { attention, op, layers };

enum class Fp8Scaling { delayed, current };

// How the loss's cross-entropy runs: the logits copied to fp32 with their softmax kept (fp32);
// one kernel over the 16-bit logits, keeping a log-sum-exp per row and writing their gradient
// in their place (fused: FlashAttention's cross-entropy, Megatron-Core's fusion, vocabulary-
// parallel included); or fused where a rank holds the whole vocabulary and fp32 where TP splits
// it (fused_whole_vocabulary: trident's, model/fused_kernels.h).
enum class CrossEntropy { fp32, fused, fused_whole_vocabulary };

// How ring attention runs each block of queries against a block of keys and merges its partial
// output into the running one: a fused kernel per block, merged inside fused kernels with the
// next block's keys and values in flight beside it (fused: Transformer Engine's, Megatron-Core's
// CP); a fused kernel call per block, merged by eager fp32 element-wise passes, the keys and
// values repeated for every head and their fp32 gradients copied and passed step by step
// (eager: PyTorch's experimental context_parallel of 2024, torchtitan's CP; each step after the
// first costs kEagerRingStepShare more, core/plan/time_model.h); or the plain multiplies with
// the scores through memory in fp32 (math: trident's, parallel/context_parallel.h).
enum class RingBlocks { fused, eager, math };

struct Software {
  std::string name = "trident";
  AttentionKernel attention_kernel = AttentionKernel::flash;
  // Gradient reduction during backward (trident's buckets) or after it (Megatron 2021;
  // overlap_grad_reduce came in 2023).
  bool overlap_gradient_reduction = true;
  // Weight gradients accumulated into the fp32 buffer by their own multiply (Megatron's
  // gradient_accumulation_fusion, trident's for 16-bit weights: parallel/linear_multiply.h), or
  // each micro-batch's 16-bit gradient added in by a pass of its own (autograd and a hook):
  // 10 bytes per parameter per micro-batch.
  bool fused_gradient_accumulation = true;
  // Tensor-parallel collectives cut into t pieces, each sent while the piece of the multiply it
  // feeds or follows computes (Megatron-Core's tp_comm_overlap, torchtitan's async TP; both need
  // sequence parallelism, whose all-gathers and reduce-scatters are what is cut).
  bool overlap_tensor_comm = false;
  // ZeRO-1 and 2's all-gather of the updated weights behind the next iteration's first forward,
  // layer by layer (Megatron-Core's overlap_param_gather), not after the step. ZeRO-3's gathers
  // (FSDP's) run behind the computation whatever this says.
  bool overlap_weight_gather = false;
  // Pipeline transfers asynchronous, behind other micro-batches' compute (Megatron-Core's
  // overlap_p2p_comm; Llama 3's asynchronous point-to-point), with the interleaved schedule
  // only, whose other chunks give them work to hide behind.
  bool overlap_pipeline_comm = false;
  // The data-parallel collectives run from buffers registered with NCCL (Megatron-FSDP's
  // nccl_ub): NVLink SHARP or copy engines move them, not SMs, so the computation beside them
  // loses only the memory bandwidth the transfer takes (twice the link's rate: read at one end,
  // written at the other), not the profile's overlap_contention.
  bool registered_buffers = false;
  // A compiler (torch.compile, Megatron's fused kernels) or hand-written kernels (trident's on
  // CUDA, model/fused_kernels.h) fuse each layer's element-wise chains: a norm's passes, the
  // activation with its gate, rotary's halves, so their bytes cross memory once.
  bool compile = true;
  // The linear layers' multiplies in FP8 (Transformer Engine, torchao's float8): at the
  // profile's fp8 rate, each input cast to FP8 first (its bytes read, a byte written for it and
  // one for its transpose).
  bool fp8 = false;
  // How FP8 casts find their scale: from the amax history, found by the cast itself (delayed:
  // Transformer Engine's default of 2023-2024), or from the tensor's own amax, a pass over it
  // before the cast (current: torchao's dynamic scaling, Transformer Engine's current scaling).
  Fp8Scaling fp8_scaling = Fp8Scaling::delayed;
  // Fused: 2 bytes per logit kept, against the fp32 logits and softmax (8) and the fp32 gradient
  // beside them (4) of a plain cross-entropy.
  CrossEntropy cross_entropy = CrossEntropy::fused_whole_vocabulary;
  // The attention kernel takes the key/value groups as they are (FlashAttention 2, cuDNN's and
  // Transformer Engine's kernels) and keeps them so for backward, or needs them repeated for
  // every query head (trident, torchtitan's repeat_kv) and keeps the repeated ones.
  bool attention_keeps_groups = false;
  // With sequence parallelism, the column-parallel layers (the attention's input projection, the
  // MLP's first) keep the all-gathered input their weights' gradients need, whole on every TP
  // rank (torchtitan's DTensor layers; trident's FP8 layers, an 8-bit copy), or keep their shard
  // and gather it again in backward (Megatron's, trident's).
  bool keeps_gathered_inputs = false;
  // With pipeline parallelism, ZeRO-3 gathers a stage's weights once per iteration and keeps
  // them, its micro-batches' gradients accumulated whole in fp32 and reduce-scattered after the
  // last (FSDP2 under torch.distributed.pipelining: no resharding after forward, gradients
  // synchronised on the last micro-batch; torchtitan's); or it gathers the weights and reduces
  // the gradients for every micro-batch (trident's).
  bool keeps_stage_gathered = false;
  RingBlocks ring_blocks = RingBlocks::math;
  SelectiveRecompute selective_recompute = SelectiveRecompute::attention;
  int64_t recompute_layer_every = 2;  // with selective_recompute=layers
  bool fused_attention() const { return attention_kernel != AttentionKernel::math; }
  // Whether the loss runs fused with the vocabulary split over `tp_size` ranks.
  bool fuses_cross_entropy(int64_t tp_size) const {
    return cross_entropy == CrossEntropy::fused ||
           (cross_entropy == CrossEntropy::fused_whole_vocabulary && tp_size == 1);
  }
};

// trident with LibTorch 2.x on CUDA (its fused kernels on); the Megatron-LM of 2021 that measured
// the A100 scaling table; Megatron-Core as of 2024-2025 with its overlaps on; Meta's stack as Dubey
// et al. 2024 describe it for Llama 3 (FSDP's gradient reduction and weight gathering behind the
// computation, asynchronous pipeline transfers, no TP overlap described, gradients accumulated by
// autograd); torchtitan (FSDP2: gradients reduced and weights gathered behind the computation by
// prefetch; compile, async TP and float8 are settings of a run); MosaicML's llm-foundry (Composer's
// FSDP with its prefetch, a Triton or flash attention kernel).
Software trident_software();
// trident's software as built against LibTorch `version` ("2.11.0"): LibTorch 1.x has no fused
// attention kernel, its attention is the math path; before 2.8 no multiply adds 16-bit products
// into fp32, so gradient accumulation is not fused (from 2.8 it is planned fused; a LibTorch whose
// multiply still cannot add into fp32 says so at run time, parallel/linear_multiply.h, and runs
// slower than planned).
Software trident_software_on_libtorch(const std::string& version);
// The software as a run of `model` at `precision` uses it, whatever `software` says:
// precision=fp8 (trident's, parallel/fp8_multiply.h) multiplies the linear layers in FP8 with
// current scaling, keeping the 8-bit copies of their gathered inputs; model.fused_kernels=false
// (trident's composite path) turns the fused kernels off and gradient-accumulation fusion with
// them, and fp64 the fused kernels (they take 16- and 32-bit floats). Applying it twice changes
// nothing.
Software as_run(Software software, const ModelConfig& model, Precision precision);
// `software` without fused kernels: element-wise work eager and an fp32 cross-entropy, as trident
// runs where its kernels do not (the CPU, fp64, a build without the CUDA toolkit).
Software without_fused_kernels(Software software);
Software megatron_2021_software();
Software megatron_core_software();
Software llama3_software();
Software torchtitan_software();
Software llm_foundry_software();
// Every preset, and the one with this name (nullptr for none).
const std::vector<Software>& software_presets();
std::vector<std::string> software_names();  // the presets' names, in order
const Software* software_named(const std::string& name);

// One setting by its name in `software.NAME=VALUE` (the fields above, without `name`), checked:
// an unknown name (with the nearest one) or a value of the wrong kind fails naming both. The
// presets are trident's defaults with such settings changed.
void set_software(Software& software, const std::string& setting, const std::string& value);
// Every setting's name, for help texts and errors.
std::vector<std::string> software_settings();
// The preset `name` with `settings` ("overlap_tensor_comm=false", ...) applied.
Software software_with(const std::string& name, const std::vector<std::string>& settings);

// "flash attention, gradient reduction overlapped, ...": what a preset assumes, for plans.
std::string describe_software(const Software& software);
const char* name(AttentionKernel kernel);
const char* name(SelectiveRecompute policy);
const char* name(Fp8Scaling scaling);

}  // namespace trident
