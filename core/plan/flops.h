// Parameter counts and training FLOPs of a GPT. Pure arithmetic; sources beside each formula.
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"

namespace trident {

// Exact parameter count of trident's GPT for a vocabulary of `vocab` rows: the token embedding
// (and an untied head), learned positions if any, the blocks and the final norm.
int64_t gpt_parameter_count(const ModelConfig& model, int64_t vocab);
// The parameters one token meets: as above with a Mixture-of-Experts layer's top-k experts and
// its router instead of all its experts (the same as gpt_parameter_count for a dense model).
int64_t gpt_active_parameter_count(const ModelConfig& model, int64_t vocab);
// Transformer block `layer`'s share of it: attention (h x (a + 2g) d for QKV, h x h out), the MLP
// (2 or, with SwiGLU, 3 h x f matrices) or, in a Mixture-of-Experts layer, its experts' (of
// moe_ffn each), the router's E x h and the shared expert's, their biases if any and two norms.
int64_t gpt_layer_parameter_count(const ModelConfig& model, int64_t layer);
// Of it, the experts' weights (all E experts' MLPs; 0 in a dense layer): what expert
// parallelism splits.
int64_t gpt_layer_expert_parameter_count(const ModelConfig& model, int64_t layer);
// ", in M Mixture-of-Experts layers of E experts of ffn F (top-k) [and a shared expert of ffn S],
// A active per token" for a
// Mixture-of-Experts model, "" for a dense one: what the logs add to a parameter count.
std::string moe_summary(const ModelConfig& model, int64_t vocab);
// The MLP width one token meets in layer `layer`: ffn, or top-k x moe_ffn (and the shared
// expert's width) in a Mixture-of-Experts layer; and its mean over the layers (the estimates'
// uniform layer).
int64_t active_ffn(const ModelConfig& model, int64_t layer);
double mean_active_ffn(const ModelConfig& model);
// One norm's: weight and bias (LayerNorm) or weight (RMSNorm).
int64_t norm_parameter_count(const ModelConfig& model);

// Narayanan et al. 2021 (arXiv 2104.04473), eq. for GPT with ffn = 4h:
// P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)). It leaves out the final LayerNorm (2h).
double narayanan_parameter_count(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq);

// FLOPs of one training iteration over `global_batch` sequences, counting a multiply-add as 2.
struct IterationFlops {
  double model = 0;     // forward + backward, no recomputation (what MFU is measured against)
  double hardware = 0;  // plus the forward work that activation recomputation repeats
  double six_pd = 0;    // 6 * parameters * tokens (Kaplan et al. 2020)
};

// Per layer and sequence, with ffn f and g key/value groups of head size d: forward =
// 2 s h (a + 2g) d + 2 s h^2 (QKV and output projections; 8 s h^2 when g = a) + 4 s h f (GELU's
// two MLP matrices; SwiGLU's three: 6 s h f) + 4 s^2 h (QK^T and attention-times-V); logits
// 2 s h V; backward = 2x forward. A Mixture-of-Experts layer's MLP counts its top-k experts
// (f = k x moe_ffn, active_ffn) and its router, 2 s h E; six_pd the active parameters. Full recompute adds one
// more forward of every layer, selective only the attention core. For f = 4h this is Megatron's
// 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) and, with full recompute, 96 B s l h^2 (1 + s/(6h) +
// V/(16 l h)) (Narayanan et al. 2021, appendix; Korthikanti et al. 2022).
IterationFlops iteration_flops(const ModelConfig& model, int64_t vocab, int64_t global_batch,
                               Recompute recompute);

// Closed forms of the two Megatron formulas above, for tests and the planner.
double megatron_flops(int64_t batch, int64_t seq, int64_t layers, int64_t hidden, int64_t vocab,
                      bool full_recompute);

// Dense 16-bit tensor-core peak of a known GPU, by (a substring of) its name as CUDA reports
// it, in TFLOP/s, for bf16 and fp16 training; 0 for other GPUs and precisions (no MFU then).
double known_peak_tflops(const std::string& device_name, Precision precision);

}  // namespace trident
