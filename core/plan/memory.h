// Memory per GPU of a training layout: model states by bytes per parameter (Rajbhandari et al.
// 2019, ZeRO), activations by Korthikanti et al. 2022 (arXiv 2205.05198), in bytes.
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/layout.h"
#include "core/plan/software.h"

namespace trident {

// Bytes per parameter of each model state. Mixed precision (bf16/fp16) with AdamW: weights 2,
// gradients 4 (accumulated in fp32, as Megatron does; 2 if kept in 16 bits), optimizer 12 (fp32
// main copy, m, v): 18 in all. fp32 training: 4 + 4 + 8 (m, v). 8-bit Adam keeps 4 + 1 + 1;
// SGD with momentum 4 + 4 (main copy and momentum) in mixed precision, 4 in fp32. ZeRO divides
// the optimizer states by d from stage 1 and the gradients from stage 2 (stage 1 holds the whole
// gradient buffer plus its reduced 1/d slice, as optim/zero.h does); stage 3 also the weights.
struct StateBytes {
  double weights = 2, grads = 4, optimizer = 12;
};
StateBytes state_bytes(Precision precision, const std::string& optimizer = "adamw");

struct MemoryEstimate {
  double parameters = 0;   // parameters held by the busiest rank (stage_parameters' most)
  double weights = 0, grads = 0, optimizer = 0;
  double activations = 0;  // peak, with the micro-batches in flight
  double transient = 0;    // the backward's working set beside them (estimate_memory says which)
  double allowance = 0;    // CUDA context, allocator fragmentation, communication buffers
  double host = 0;         // offload: optimizer states and a gradient copy in host memory
  double gathered = 0;     // ZeRO-3: whole weights gathered at once (beside their shard in `weights`)
  double total() const { return weights + gathered + grads + optimizer + activations + transient + allowance; }  // on the device
};

// Activation bytes one transformer layer stores for one micro-batch of b sequences
// (Korthikanti et al. 2022, eqs. 1-5, 16-bit activations): s b h (34 + 5 a s / h) without
// parallelism; with TP t, s b h (10 + 24/t + 5 a s / (h t)); with TP and sequence parallelism
// s b h (34 + 5 a s / h) / t, as Megatron gathers the linear layers' inputs again in backward
// (software that keeps them gathered keeps those two whole: 4 (1 - 1/t) s b h more).
// Selective recompute drops the 5 a s / h term; full recompute
// keeps only the layer input, 2 s b h (divided by t with sequence parallelism). Context
// parallelism c holds s / c tokens, and its ring attention keeps no s x s scores (it keeps
// q, k, v, the output and one log-sum-exp per row, and recomputes the scores in backward):
// s b h (34 / c) with the per-token terms as above and no 5 a s / h term; Ulysses' plain
// attention of a / c heads over whole sequences keeps the 5 a s / h term of the whole sequence s
// for each of its s / c tokens (Ulysses alone: USP's groups meet in a ring, which keeps none).
// The 34 counts two dropout masks (2): 32 without dropout. With g key/value groups and an MLP
// of f the 24 that TP splits is 4 + 4 + 4 f / h (GELU) or + 8 f / h (SwiGLU: gate, SiLU and up
// outputs and their product; fused, 6 f / h), K and V counting 4 g / a instead of 4 where only
// the grouped ones are kept (selective recompute, ring attention, a kernel that takes the groups
// as they are). A fused attention kernel (`software.fused_attention()`) keeps no scores either:
// no 5 a s / h term. In FP8 the multiplies' inputs are kept in a byte (the two replicated ones,
// the projection's and the MLP output multiply's). Mixture-of-Experts layers count f as their tokens' k experts' width
// and add their routing copies (4k + 4, not split by TP), both averaged over the layers.
// Selective recompute keeps what the software's policy keeps (core/plan/software.h): without the
// attention core as above; per op, the layer's input (2), its attention output (2 a d / h) and
// every other multiply's output (half of Q, K, V, the projection's, the MLP's f-wide ones and
// its output); per layer, one layer in n as under full recompute and the rest as under none.
double layer_activation_bytes(const ModelConfig& model, const Layout& layout, const Software& software);

// Parameters on one rank of pipeline stage `stage`: its layers (core/layout.h's stage_layers),
// the embedding (and learned positions) on the first, the final norm and the head (untied, or
// the tied embedding's copy when p > 1) on the last; split over TP, and the experts over EP as
// well. Dense and experts apart, as ZeRO shards them over different ranks
// (optim/parameter_groups.h); `embedding`: the input embedding's (and learned positions') part
// of `dense`.
struct HeldParameters {
  double dense = 0, experts = 0, embedding = 0;
  double total() const { return dense + experts; }
};
HeldParameters stage_held_parameters(const ModelConfig& model, int64_t vocab, const Layout& layout, int64_t stage);
double stage_parameters(const ModelConfig& model, int64_t vocab, const Layout& layout, int64_t stage);

// Whether ZeRO-3 keeps each pipeline stage's weights gathered all iteration, gathering once and
// reducing once (software.keeps_stage_gathered with ZeRO-3 and pipeline parallelism).
bool keeps_stage_gathered(const Layout& layout, const Software& software);

// The busiest rank: the most parameters any stage holds, and, as under 1F1B on the first stage,
// up to p micro-batches of activations (M under GPipe; interleaving adds a factor
// 1 + (p-1)/(p v)) counted with the most layers any stage holds (a bound when the embedding and
// the loss count as layers: the stages with most layers hold fewer micro-batches).
// The last stage's fp32 logits (4 s b V / t bytes, kept with their softmax: twice that; a fused
// cross-entropy keeps the 16-bit logits only, 2 s b V / t) are counted as if on the same rank
// when p = 1. The backward works beside what is stored: one
// layer's activations as without recomputation (the layer recomputed, or the gradients flowing
// back through it: tensors of the same sizes), or, where the loss is, the logits' fp32 gradient
// (4 s b V / t), or trident's ring attention's block of fp32 scores (20 bytes a score of
// [b, a / (t u), s / 2r, s / 2r]), whichever is larger. Allowance: 1 GiB + 5% of the rest (stated, not
// measured). ZeRO shards over the data- and context-parallel ranks (d c), the experts over their
// d c / ep copies; ZeRO-3 gathers the
// stage's embeddings and final LayerNorm for the whole iteration and two blocks at a time (the
// one computing and the next, prefetched: parallel/sharded_parameters.h), or with
// keeps_stage_gathered the stage's 16-bit weights whole and its gradients whole in fp32. With offload the
// optimizer states (and an fp32 copy of the rank's reduced gradients) are in host memory, not
// on the device. `optimizer` is adamw | adam8bit | sgd; `software` as a run of `model` at
// `precision` uses it (as_run: FP8, model.fused_kernels).
MemoryEstimate estimate_memory(const ModelConfig& model, int64_t vocab, const Layout& layout,
                               Precision precision, const Software& software, const std::string& optimizer = "adamw");

}  // namespace trident
