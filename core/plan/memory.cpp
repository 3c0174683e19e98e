#include "core/plan/memory.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/plan/flops.h"
#include "core/schedule/pipeline_simulation.h"

namespace trident {

StateBytes state_bytes(Precision precision, const std::string& optimizer) {
  const bool fp64 = precision == Precision::fp64;
  const double weight = fp64 ? 8 : mixed(precision) ? 2 : 4;
  const double grad = mixed(precision) ? 4 : weight;  // mixed precision accumulates in fp32
  const double main_copy = mixed(precision) ? 4 : 0;  // fp32 master weights
  const double full = fp64 ? 8 : 4;
  if (optimizer == "adamw") return {weight, grad, main_copy + 2 * full};
  if (optimizer == "adam8bit") return {weight, grad, main_copy + 2};
  if (optimizer == "sgd") return {weight, grad, main_copy + full};
  fail("unknown optimizer '", optimizer, "' (adamw, adam8bit, sgd)");
}

namespace {

// Per s b h, what a Mixture-of-Experts layer keeps beside the rest: its k copies of each token
// sorted by expert and the experts' k outputs before their weighted sum (2k + 2k), for the whole
// sequence on every TP rank, and its router's fp32 input (4), averaged over the layers as the
// experts' width is.
double routing_bytes(const ModelConfig& model) {
  return double(model.moe_layers()) / double(model.num_layers) * (4 * double(model.moe_router_topk) + 4);
}

// One layer's bytes kept under recompute `recompute`, the attention core's policy for selective.
double kept_bytes(const ModelConfig& model, const Layout& layout, Recompute recompute, const Software& software) {
  const bool fused_attention = software.fused_attention();
  const double s = double(model.seq_length) / double(layout.cp_size), b = double(layout.micro_batch),
               h = double(model.hidden_size), a = double(model.num_attention_heads),
               g = double(model.query_groups()), f = mean_active_ffn(model), t = double(layout.tp_size);
  const double sbh = s * b * h;
  if (recompute == Recompute::full) return 2 * sbh / (layout.sequence_parallel ? t : 1);
  // Ring attention keeps no scores (USP's too: its Ulysses groups meet in a ring); Ulysses'
  // attention alone is the plain one, of a / c heads over whole sequences: c times the local
  // tokens' keys for 1 / c of the heads, per local token 5 a S / h as without context
  // parallelism (S the whole sequence).
  const bool ring = layout.ring_size() > 1;
  const bool no_scores = recompute == Recompute::selective || ring;
  const double attention_scores = no_scores || fused_attention ? 0 : 5 * a * double(model.seq_length) / h;
  // Per s b h, what TP splits: Q 2; K and V 2 each, or 2 g / a each where only the grouped ones
  // are kept (the attention core recomputed, or ring attention); the projection's input 2; the
  // MLP's 4 f / h (GELU's input and output) or 8 f / h (SwiGLU's gate, SiLU and up outputs and
  // their product; fused, 6: the gate and up outputs and the product): 24 for GPT-2. What it
  // does not: the two norms' inputs 4 (LayerNorm and RMSNorm alike keep their input and a
  // statistic per row), the two linear layers' inputs 4 and two dropout masks 2 (none without
  // dropout). In FP8 the multiplies keep their inputs in a byte: the two linear layers' inputs
  // 2 and the MLP's output multiply's f / h. A kernel that takes the key/value groups as they
  // are keeps them so (4 g / a), one that needs them repeated keeps the repeated ones (4).
  // After Ulysses a ring keeps the groups as dealt out: lcm(g / t, u) of a rank's a / t heads.
  // With sequence parallelism software that keeps the gathered inputs keeps the two linear
  // layers' inputs whole (4, or 2 in FP8) rather than split.
  const double kept_groups =
      layout.ulysses_size > 1 ? double(std::lcm(model.query_groups() / layout.tp_size, layout.ulysses_size)) * t : g;
  const double kv = no_scores || (fused_attention && software.attention_keeps_groups) ? 4 * kept_groups / a : 4;
  const double fp8 = software.fp8 ? 1 : 0;
  const double mlp = (model.activation == Activation::swiglu ? (software.compile ? 6 : 8) : 4) * f / h - fp8 * f / h;
  // Q, K, V and the projection's input are a d wide per token (h unless model.kv_channels says
  // otherwise); model.qk_layernorm keeps the norms' inputs too, Q's and K's (2 and 2 g / a).
  const double width = double(model.attention_width()) / h;
  const double head_norms = model.qk_layernorm ? 2 * (1 + g / a) : 0;
  const double split = (4 - fp8 + kv + head_norms) * width + mlp, replicated = (model.hidden_dropout > 0 ? 10 : 8) - 2 * fp8;
  const double experts = routing_bytes(model);
  if (layout.sequence_parallel) {
    const double gathered = software.keeps_gathered_inputs ? (4 - 2 * fp8) * (1 - 1 / t) : 0;
    return sbh * ((replicated + split + attention_scores) / t + gathered + experts);
  }
  return sbh * (replicated + split / t + attention_scores / t + experts);
}

// Per op: per s b h, the layer input 2 and the two h-wide multiply outputs' half (2) where TP
// does not split them (SP does), the attention output 2 a d / h, and half of Q, K and V
// ((a + 2g) d / h) and the MLP's f-wide outputs (one or two of f / h) over TP; a
// Mixture-of-Experts layer's routing copies as without recomputation.
double kept_per_op(const ModelConfig& model, const Layout& layout) {
  const double s = double(model.seq_length) / double(layout.cp_size), b = double(layout.micro_batch),
               h = double(model.hidden_size), t = double(layout.tp_size);
  const double width = double(model.attention_width()) / h, qkv = double(model.qkv_rows()) / h;
  const double wide = (model.activation == Activation::swiglu ? 2 : 1) * mean_active_ffn(model) / h;
  const double replicated = 2 + 2, split = 2 * width + qkv + wide;
  return s * b * h * (replicated / (layout.sequence_parallel ? t : 1) + split / t + routing_bytes(model));
}

}  // namespace

double layer_activation_bytes(const ModelConfig& model, const Layout& layout, const Software& software) {
  if (layout.recompute != Recompute::selective) return kept_bytes(model, layout, layout.recompute, software);
  switch (software.selective_recompute) {
    case SelectiveRecompute::attention: return kept_bytes(model, layout, Recompute::selective, software);
    case SelectiveRecompute::op: return kept_per_op(model, layout);
    case SelectiveRecompute::layers: {
      const double n = double(software.recompute_layer_every);
      return ((n - 1) * kept_bytes(model, layout, Recompute::none, software) +
              kept_bytes(model, layout, Recompute::full, software)) / n;
    }
  }
  return kept_bytes(model, layout, Recompute::selective, software);
}

namespace {

// Layer `layer`'s parameters on one rank: over TP, its experts over TP x EP.
HeldParameters layer_held_parameters(const ModelConfig& model, const Layout& layout, int64_t layer) {
  const double experts = double(gpt_layer_expert_parameter_count(model, layer));
  const double t = double(layout.tp_size);
  return {(double(gpt_layer_parameter_count(model, layer)) - experts) / t, experts / (t * double(layout.ep_size))};
}

// Bytes of one parameter group's states for `count` parameters a rank holds, sharded as `zero` says.
struct GroupStates {
  double weights = 0, grads = 0, optimizer = 0, host = 0;
};
GroupStates group_states(double count, const ZeroSharding& zero, const StateBytes& bytes, Precision precision,
                         bool offload) {
  const double d = double(zero.replicas);
  GroupStates out;
  out.weights = count * bytes.weights / (zero.shards_weights() ? d : 1);
  // Stage 1 keeps the whole gradient buffer and the reduce-scatter's 1/d slice beside it.
  out.grads = count * bytes.grads * (zero.shards_grads() ? 1 / d : zero.reduce_scatters() ? 1 + 1 / d : 1);
  out.optimizer = count * bytes.optimizer / (zero.reduce_scatters() ? d : 1);
  if (offload) {
    // Main weights exist on the host even when the model trains in their precision.
    const double main_copy = mixed(precision) ? 0 : bytes.weights;
    const double host_grads = bytes.grads / (zero.reduce_scatters() ? d : 1);
    out.host = out.optimizer + count * (main_copy / (zero.reduce_scatters() ? d : 1) + host_grads);
    out.optimizer = 0;
  }
  return out;
}

}  // namespace

HeldParameters stage_held_parameters(const ModelConfig& model, int64_t vocab, const Layout& layout, int64_t stage) {
  const double h = double(model.hidden_size), V = double(vocab);
  HeldParameters held;
  for (int64_t layer : stage_layer_indices(layout, model.num_layers, stage)) {
    const HeldParameters in_layer = layer_held_parameters(model, layout, layer);
    held.dense += in_layer.dense;
    held.experts += in_layer.experts;
  }
  const double t = double(layout.tp_size);  // the embeddings, final norm and head split over TP
  if (stage == 0) {
    const bool learned = model.position_embedding_type == PositionEmbeddingType::learned;
    held.embedding = (V * h + (learned ? double(model.seq_length) * h : 0)) / t;
    held.dense += held.embedding;
  }
  if (stage == layout.head_rank()) {
    const bool own_head = model.untie_embeddings_and_output_weights || layout.pp_size > 1;
    held.dense += (double(norm_parameter_count(model)) + (own_head ? V * h : 0)) / t;
  }
  return held;
}

bool keeps_stage_gathered(const Layout& layout, const Software& software) {
  return layout.zero().shards_weights() && software.keeps_stage_gathered && layout.pp_size > 1;
}

double stage_parameters(const ModelConfig& model, int64_t vocab, const Layout& layout, int64_t stage) {
  return stage_held_parameters(model, vocab, layout, stage).total();
}

MemoryEstimate estimate_memory(const ModelConfig& model, int64_t vocab, const Layout& layout,
                               Precision precision, const Software& given, const std::string& optimizer) {
  const Software software = as_run(given, model, precision);
  // ZeRO shards over every rank that holds a copy of the weights: data x context parallel, and
  // for the experts their expert-data-parallel copies.
  const ZeroSharding zero = layout.zero();
  const double t = double(layout.tp_size);
  MemoryEstimate out;

  // ZeRO-3 gathers a stage's parameters but for the blocks beyond the two it holds whole: all
  // but its two largest (a Mixture-of-Experts layer's outweighs a dense one's).
  const StateBytes bytes = state_bytes(precision, optimizer);
  int64_t most_layers = 0;
  double most_gathered = 0;
  HeldParameters busiest;
  for (int64_t stage = 0; stage < layout.pp_size; ++stage) {
    std::vector<double> blocks;
    for (int64_t layer : stage_layer_indices(layout, model.num_layers, stage))
      blocks.push_back(layer_held_parameters(model, layout, layer).total());
    std::sort(blocks.begin(), blocks.end(), std::greater<>());
    const HeldParameters held = stage_held_parameters(model, vocab, layout, stage);
    double not_gathered = 0;
    for (size_t i = 2; i < blocks.size(); ++i) not_gathered += blocks[i];
    most_layers = std::max(most_layers, int64_t(blocks.size()));
    if (held.total() > busiest.total()) busiest = held;
    most_gathered = std::max(most_gathered, held.total() - not_gathered);
  }
  out.parameters = busiest.total();

  const GroupStates dense = group_states(busiest.dense, zero, bytes, precision, layout.offload);
  const GroupStates experts = group_states(busiest.experts, layout.expert_zero(), bytes, precision, layout.offload);
  out.weights = dense.weights + experts.weights;
  out.grads = dense.grads + experts.grads;
  if (keeps_stage_gathered(layout, software)) {
    // The busiest stage's weights whole all iteration, its gradients accumulated whole in fp32.
    out.gathered = busiest.total() * bytes.weights;
    out.grads += busiest.total() * bytes.grads;
  } else if (zero.shards_weights()) {
    out.gathered = most_gathered * bytes.weights;
  }
  out.optimizer = dense.optimizer + experts.optimizer;
  out.host = dense.host + experts.host;

  // Micro-batches held at once by the busiest rank, the schedule run on paper: 1F1B's (and ZB-H1's
  // and ZB-V's) min(p, M), GPipe's M, interleaved 1F1B's p (1 + (p - 1) / (p v)), DualPipe-V's p + 1/2.
  const double in_flight = schedule_shape(layout, {1, 1, 1}).held_micro_batches;
  // The formulas count 16-bit activations; fp32 and fp64 runs store twice and four times that.
  const double width = precision == Precision::fp64 ? 4 : precision == Precision::fp32 ? 2 : 1;
  out.activations = width * layer_activation_bytes(model, layout, software) * double(most_layers) * in_flight;
  // Fused, the logits in the model's width; else fp32 logits and softmax.
  const double logit_bytes = software.fuses_cross_entropy(layout.tp_size) ? bytes.weights : 8.0;
  const double logits =
      logit_bytes * double(model.seq_length / layout.cp_size) * double(layout.micro_batch) * double(vocab) / t;
  if (layout.pp_size == 1) out.activations += logits;
  Layout stored_whole = layout;
  stored_whole.recompute = Recompute::none;
  const double logits_gradient =
      layout.pp_size == 1 && !software.fuses_cross_entropy(layout.tp_size) ? logits / 2 : 0;  // fp32 already
  // trident's ring (math blocks) works on one block of scores at a time, in fp32 (fp64 in an fp64
  // run): the scores, their probabilities and backward their gradients, about 20 bytes a score of
  // [b, a / (t u), n, n] for chunks of n = s / 2r tokens (parallel/context_parallel.h).
  double ring_block = 0;
  if (layout.ring_size() > 1 && software.ring_blocks == RingBlocks::math) {
    const double n = double(model.seq_length) / (2.0 * double(layout.ring_size()));
    const double heads = double(model.num_attention_heads) / (t * double(layout.ulysses_size));
    ring_block = 20 * (precision == Precision::fp64 ? 2 : 1) * double(layout.micro_batch) * heads * n * n;
  }
  out.transient =
      std::max({width * layer_activation_bytes(model, stored_whole, software), logits_gradient, ring_block});

  const double rest = out.weights + out.gathered + out.grads + out.optimizer + out.activations + out.transient;
  out.allowance = double(1 << 30) + 0.05 * rest;
  return out;
}

}  // namespace trident
