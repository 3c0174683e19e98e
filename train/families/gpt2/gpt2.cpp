#include "train/families/gpt2/gpt2.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/checkpoint/hf_files.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trident {
namespace {

constexpr const char* kPrefix = "transformer.";

// trident's QKV rows are [head][q|k|v][d] (a contiguous group of whole heads per TP rank);
// HF's c_attn output columns are [q|k|v][head][d]. Along dim 0 of a [3h, ...] tensor:
torch::Tensor heads_first_to_qkv_first(const torch::Tensor& t, int64_t heads) {
  auto sizes = t.sizes().vec();
  std::vector<int64_t> split = {heads, 3, t.size(0) / (3 * heads)};
  split.insert(split.end(), sizes.begin() + 1, sizes.end());
  std::vector<int64_t> order = {1, 0, 2};
  for (int64_t d = 3; d < int64_t(split.size()); ++d) order.push_back(d);
  return t.reshape(split).permute(order).reshape(sizes);
}
torch::Tensor qkv_first_to_heads_first(const torch::Tensor& t, int64_t heads) {
  auto sizes = t.sizes().vec();
  std::vector<int64_t> split = {3, heads, t.size(0) / (3 * heads)};
  split.insert(split.end(), sizes.begin() + 1, sizes.end());
  std::vector<int64_t> order = {1, 0, 2};
  for (int64_t d = 3; d < int64_t(split.size()); ++d) order.push_back(d);
  return t.reshape(split).permute(order).reshape(sizes);
}

// One weight in both conventions: its names and how its tensor changes on the way to HF.
struct Mapping {
  std::string trident, hf;
  enum { same, transposed, qkv_weight, qkv_bias } change;
};

std::vector<Mapping> mappings(const ModelConfig& model) {
  std::vector<Mapping> out = {{"wte.weight", "wte.weight", Mapping::same},
                              {"wpe.weight", "wpe.weight", Mapping::same},
                              {"ln_f.weight", "ln_f.weight", Mapping::same},
                              {"ln_f.bias", "ln_f.bias", Mapping::same}};
  for (int64_t i = 0; i < model.num_layers; ++i) {
    const std::string t = str("h", i, "."), h = str("h.", i, ".");
    for (const char* ln : {"ln_1", "ln_2"})
      for (const char* p : {".weight", ".bias"}) out.push_back({t + ln + p, h + ln + p, Mapping::same});
    out.push_back({t + "attn.qkv.weight", h + "attn.c_attn.weight", Mapping::qkv_weight});
    out.push_back({t + "attn.qkv.bias", h + "attn.c_attn.bias", Mapping::qkv_bias});
    out.push_back({t + "attn.out.weight", h + "attn.c_proj.weight", Mapping::transposed});
    out.push_back({t + "attn.out.bias", h + "attn.c_proj.bias", Mapping::same});
    out.push_back({t + "mlp.up.weight", h + "mlp.c_fc.weight", Mapping::transposed});
    out.push_back({t + "mlp.up.bias", h + "mlp.c_fc.bias", Mapping::same});
    out.push_back({t + "mlp.down.weight", h + "mlp.c_proj.weight", Mapping::transposed});
    out.push_back({t + "mlp.down.bias", h + "mlp.c_proj.bias", Mapping::same});
  }
  return out;
}

}  // namespace

std::map<std::string, torch::Tensor> to_hf_gpt2(const std::map<std::string, torch::Tensor>& weights,
                                                const ModelConfig& model, torch::Dtype dtype) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& m : mappings(model)) {
    const auto found = weights.find(m.trident);
    if (found == weights.end()) fail("the checkpoint has no weight '", m.trident, "'");
    torch::Tensor t = found->second;
    if (m.trident == "wte.weight") t = t.narrow(0, 0, model.vocab_size);  // the padding rows are never used
    switch (m.change) {
      case Mapping::same: break;
      case Mapping::transposed: t = t.t(); break;
      case Mapping::qkv_weight: t = heads_first_to_qkv_first(t, model.num_attention_heads).t(); break;
      case Mapping::qkv_bias: t = heads_first_to_qkv_first(t, model.num_attention_heads); break;
    }
    out[kPrefix + m.hf] = t.to(dtype).contiguous();
  }
  return out;
}

std::string hf_gpt2_config(const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype) {
  const json config = {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", model.vocab_size},
          {"n_positions", model.seq_length},
          {"n_ctx", model.seq_length},
          {"n_embd", model.hidden_size},
          {"n_layer", model.num_layers},
          {"n_head", model.num_attention_heads},
          {"n_inner", model.ffn()},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", model.layernorm_epsilon},
          {"initializer_range", model.init_method_std},
          {"resid_pdrop", model.hidden_dropout},
          {"embd_pdrop", model.hidden_dropout},
          {"attn_pdrop", model.attention_dropout},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"bos_token_id", end_of_document},
          {"eos_token_id", end_of_document},
          {"torch_dtype", hf_dtype_name(dtype)}};
  return config.dump(2) + "\n";
}

std::map<std::string, torch::Tensor> read_hf_gpt2(const std::string& dir, const ModelConfig& model) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const json config = read_hf_config(dir, "train.init_from");
  const auto differs = [&](const char* hf_key, const std::string& trident_key, const json& expected) {
    fail("train.init_from: '", config_path, "' has ", hf_key, "=", config.value(hf_key, json()).dump(), " but ",
         trident_key, " asks for ", expected.dump());
  };
  try {
    if (config.value("model_type", "") != "gpt2") differs("model_type", "trident's GPT", "gpt2");
    if (config.at("n_layer") != model.num_layers) differs("n_layer", "model.num_layers", model.num_layers);
    if (config.at("n_embd") != model.hidden_size) differs("n_embd", "model.hidden_size", model.hidden_size);
    if (config.at("n_head") != model.num_attention_heads)
      differs("n_head", "model.num_attention_heads", model.num_attention_heads);
    const json inner = config.value("n_inner", json());
    if (!inner.is_null() && inner != model.ffn()) differs("n_inner", "model.ffn_hidden_size", model.ffn());
    if (inner.is_null() && 4 * model.hidden_size != model.ffn())
      differs("n_inner", "model.ffn_hidden_size", model.ffn());
    if (config.at("n_positions").get<int64_t>() < model.seq_length)
      differs("n_positions", "model.seq_length (at least)", model.seq_length);
    if (config.at("vocab_size").get<int64_t>() > model.vocab_size)
      differs("vocab_size", "model.vocab_size (at most)", model.vocab_size);
    const std::string activation = config.value("activation_function", "gelu_new");
    if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
      differs("activation_function", "trident's GELU (the tanh approximation)", "gelu_new");
    if (std::abs(config.value("layer_norm_epsilon", 1e-5) - model.layernorm_epsilon) > 1e-12 * model.layernorm_epsilon)
      differs("layer_norm_epsilon", "model.layernorm_epsilon", model.layernorm_epsilon);
    // GPT-2 variants trident's GPT does not compute: each would load and train, but as another model.
    if (!config.value("scale_attn_weights", true))
      differs("scale_attn_weights", "trident's attention (scores / sqrt(head size))", true);
    if (config.value("scale_attn_by_inverse_layer_idx", false))
      differs("scale_attn_by_inverse_layer_idx", "trident's attention (the same scale in every layer)", false);
    if (!config.value("tie_word_embeddings", true))
      differs("tie_word_embeddings", "trident's output head (the token embedding)", true);
  } catch (const json::exception& e) {
    fail("train.init_from: '", config_path, "' lacks a GPT-2 key: ", e.what());
  }

  HfWeightFiles file(dir, "train.init_from");
  const auto stored = [&](const std::string& hf) -> std::string {
    for (const std::string& name : {kPrefix + hf, hf})
      if (file.contains(name)) return name;
    fail("train.init_from: '", file.description(), "' has no tensor '", kPrefix, hf, "' (nor '", hf, "')");
  };
  std::map<std::string, torch::Tensor> out;
  for (const auto& m : mappings(model)) {
    torch::Tensor t = file.read(stored(m.hf));
    switch (m.change) {
      case Mapping::same: break;
      case Mapping::transposed: t = t.t(); break;
      case Mapping::qkv_weight: t = qkv_first_to_heads_first(t.t(), model.num_attention_heads); break;
      case Mapping::qkv_bias: t = qkv_first_to_heads_first(t, model.num_attention_heads); break;
    }
    if (m.trident == "wpe.weight") t = t.narrow(0, 0, model.seq_length);
    out[m.trident] = t.contiguous();
  }
  return out;
}

// GPT2LMHeadModel holds the standard GPT architecture and nothing else.
Family gpt2_family() {
  return {"gpt2", [](const ModelConfig& model) { return model.non_standard_gpt_setting(); }, to_hf_gpt2, hf_gpt2_config,
          read_hf_gpt2};
}

}  // namespace trident
