#include "core/plan/flops.h"

#include <utility>

#include "core/error.h"
#include "core/text.h"

namespace trident {

namespace {

// One MLP of width f: gate (SwiGLU only), up and down, and their biases if any.
int64_t mlp_parameter_count(const ModelConfig& model, int64_t f) {
  const int64_t h = model.hidden_size, bias = model.add_bias_linear ? 1 : 0;
  return model.activation == Activation::swiglu ? 3 * h * f + bias * (2 * f + h) : 2 * h * f + bias * (f + h);
}

// Layer `layer` with `experts` of a Mixture-of-Experts layer's counted (all, or the top-k).
int64_t layer_parameter_count(const ModelConfig& model, int64_t layer, int64_t experts) {
  const int64_t h = model.hidden_size, qkv = model.qkv_rows(), width = model.attention_width();
  const int64_t bias = model.add_bias_linear ? 1 : 0;
  const int64_t per_channel = norm_parameter_count(model) / h;  // a norm's parameters per channel: 1 or 2
  const int64_t head_norms = model.qk_layernorm ? 2 * per_channel * model.head_dim() : 0;
  const int64_t attention = h * qkv + width * h + bias * (qkv + h) + head_norms;  // QKV, output projection, q/k norms
  const int64_t shared = model.moe_shared_expert_intermediate_size;
  const int64_t mlp = model.moe_layer(layer) ? experts * mlp_parameter_count(model, model.moe_ffn()) +
                                                   model.num_moe_experts * h +
                                                   (shared > 0 ? mlp_parameter_count(model, shared) : 0)
                                             : mlp_parameter_count(model, model.ffn());
  return attention + mlp + 2 * norm_parameter_count(model);
}

int64_t parameter_count(const ModelConfig& model, int64_t vocab, int64_t experts) {
  const int64_t h = model.hidden_size;
  const int64_t positions = model.position_embedding_type == PositionEmbeddingType::learned ? model.seq_length : 0;
  const int64_t head = model.untie_embeddings_and_output_weights ? vocab * h : 0;
  int64_t count = vocab * h + positions * h + head + norm_parameter_count(model);
  for (int64_t layer = 0; layer < model.num_layers; ++layer) count += layer_parameter_count(model, layer, experts);
  return count;
}

}  // namespace

int64_t gpt_layer_parameter_count(const ModelConfig& model, int64_t layer) {
  return layer_parameter_count(model, layer, model.num_moe_experts);
}

int64_t gpt_layer_expert_parameter_count(const ModelConfig& model, int64_t layer) {
  return model.moe_layer(layer) ? model.num_moe_experts * mlp_parameter_count(model, model.moe_ffn()) : 0;
}

int64_t active_ffn(const ModelConfig& model, int64_t layer) {
  return model.moe_layer(layer)
             ? model.moe_router_topk * model.moe_ffn() + model.moe_shared_expert_intermediate_size
             : model.ffn();
}

std::string moe_summary(const ModelConfig& model, int64_t vocab) {
  if (model.num_moe_experts == 0) return "";
  const int64_t shared = model.moe_shared_expert_intermediate_size;
  return str(", in ", model.moe_layers(), " Mixture-of-Experts layers of ", model.num_moe_experts,
             " experts of ffn ", model.moe_ffn(), " (top-", model.moe_router_topk, ")",
             shared > 0 ? str(" and a shared expert of ffn ", shared) : std::string(), ", ",
             si_units(double(gpt_active_parameter_count(model, vocab))), " active per token");
}

double mean_active_ffn(const ModelConfig& model) {
  double sum = 0;
  for (int64_t layer = 0; layer < model.num_layers; ++layer) sum += double(active_ffn(model, layer));
  return sum / double(model.num_layers);
}

int64_t norm_parameter_count(const ModelConfig& model) {
  return (model.normalization == Normalization::layernorm ? 2 : 1) * model.hidden_size;
}

int64_t gpt_parameter_count(const ModelConfig& model, int64_t vocab) {
  return parameter_count(model, vocab, model.num_moe_experts);
}

int64_t gpt_active_parameter_count(const ModelConfig& model, int64_t vocab) {
  return parameter_count(model, vocab, model.moe_router_topk);
}

double narayanan_parameter_count(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq) {
  const double l = layers, h = hidden;
  return 12 * l * h * h * (1 + 13 / (12 * h) + double(vocab + seq) / (12 * l * h));
}

IterationFlops iteration_flops(const ModelConfig& model, int64_t vocab, int64_t global_batch,
                               Recompute recompute) {
  const double b = global_batch, s = model.seq_length, h = model.hidden_size, l = model.num_layers,
               qkv = double(model.qkv_rows()), width = double(model.attention_width());
  const double mlp_matrices = model.activation == Activation::swiglu ? 3 : 2;
  const double attention_core_forward = b * 4 * s * s * width;
  double layers_forward = 0;
  for (int64_t layer = 0; layer < model.num_layers; ++layer) {
    const double router = model.moe_layer(layer) ? 2 * s * h * double(model.num_moe_experts) : 0;
    layers_forward += b * (2 * s * h * (qkv + width) + mlp_matrices * 2 * s * h * double(active_ffn(model, layer)) + router) +
                      attention_core_forward;
  }
  const double logits_forward = b * 2 * s * h * vocab;

  IterationFlops out;
  out.model = 3 * (layers_forward + logits_forward);
  out.hardware = out.model;
  if (recompute == Recompute::full) out.hardware += layers_forward;
  if (recompute == Recompute::selective) out.hardware += l * attention_core_forward;
  out.six_pd = 6.0 * double(gpt_active_parameter_count(model, vocab)) * b * s;
  return out;
}

double megatron_flops(int64_t batch, int64_t seq, int64_t layers, int64_t hidden, int64_t vocab,
                      bool full_recompute) {
  const double b = batch, s = seq, l = layers, h = hidden, v = vocab;
  if (full_recompute) return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
  return 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h));
}

double known_peak_tflops(const std::string& device_name, Precision precision) {
  if (!mixed(precision)) return 0.0;
  // NVIDIA's data sheets, dense (half the "with sparsity" figures); the first match wins, so the
  // PCIe and NVL parts come before their SXM names. V100 has no bf16 but the same fp16 peak is
  // listed.
  static const std::pair<const char*, double> peaks[] = {{"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.0},
                                                         {"H200 NVL", 835.0},  {"H200", 989.0},     {"A100", 312.0},
                                                         {"V100-PCIE", 112.0}, {"V100", 125.0}};
  for (const auto& [name, peak] : peaks)
    if (device_name.find(name) != std::string::npos) return peak;
  return 0.0;
}

}  // namespace trident
