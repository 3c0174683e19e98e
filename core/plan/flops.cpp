#include "core/plan/flops.h"

#include <utility>

namespace trident {

int64_t gpt_layer_parameter_count(const ModelConfig& model) {
  const int64_t h = model.hidden_size, f = model.ffn(), qkv = model.qkv_rows();
  const int64_t bias = model.add_bias_linear ? 1 : 0;
  const int64_t attention = h * qkv + h * h + bias * (qkv + h);  // QKV and output projection
  const int64_t mlp = model.activation == Activation::swiglu ? 3 * h * f + bias * (2 * f + h)  // gate, up, down
                                                             : 2 * h * f + bias * (f + h);
  return attention + mlp + 2 * norm_parameter_count(model);
}

int64_t norm_parameter_count(const ModelConfig& model) {
  return (model.normalization == Normalization::layernorm ? 2 : 1) * model.hidden_size;
}

int64_t gpt_parameter_count(const ModelConfig& model, int64_t vocab) {
  const int64_t h = model.hidden_size;
  const int64_t positions = model.position_embedding_type == PositionEmbeddingType::learned ? model.seq_length : 0;
  const int64_t head = model.untie_embeddings_and_output_weights ? vocab * h : 0;
  const int64_t embeddings = vocab * h + positions * h + head;
  return model.num_layers * gpt_layer_parameter_count(model) + embeddings + norm_parameter_count(model);
}

double narayanan_parameter_count(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq) {
  const double l = layers, h = hidden;
  return 12 * l * h * h * (1 + 13 / (12 * h) + double(vocab + seq) / (12 * l * h));
}

IterationFlops iteration_flops(const ModelConfig& model, int64_t vocab, int64_t global_batch,
                               Recompute recompute) {
  const double b = global_batch, s = model.seq_length, h = model.hidden_size, f = model.ffn(),
               l = model.num_layers, qkv = double(model.qkv_rows());
  const double mlp_matrices = model.activation == Activation::swiglu ? 3 : 2;
  const double matrices_forward = b * (2 * s * h * (qkv + h) + mlp_matrices * 2 * s * h * f);
  const double attention_core_forward = b * 4 * s * s * h;
  const double layer_forward = matrices_forward + attention_core_forward;
  const double logits_forward = b * 2 * s * h * vocab;

  IterationFlops out;
  out.model = 3 * (l * layer_forward + logits_forward);
  out.hardware = out.model;
  if (recompute == Recompute::full) out.hardware += l * layer_forward;
  if (recompute == Recompute::selective) out.hardware += l * attention_core_forward;
  out.six_pd = 6.0 * double(gpt_parameter_count(model, vocab)) * b * s;
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
  // PCIe parts come before their SXM names. V100 has no bf16 but the same fp16 peak is listed.
  static const std::pair<const char*, double> peaks[] = {
      {"H100 PCIe", 756.0}, {"H100", 989.0},     {"H200", 989.0},
      {"A100", 312.0},      {"V100-PCIE", 112.0}, {"V100", 125.0}};
  for (const auto& [name, peak] : peaks)
    if (device_name.find(name) != std::string::npos) return peak;
  return 0.0;
}

}  // namespace trident
