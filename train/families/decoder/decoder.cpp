#include "train/families/decoder/decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/rotary.h"
#include "train/checkpoint/hf_files.h"

using nlohmann::json;

namespace trident {
namespace {

// The tensors of each linear layer: ".weight", and ".bias" with model.add_bias_linear.
std::vector<std::string> linear_tensors(const ModelConfig& model) {
  return model.add_bias_linear ? std::vector<std::string>{".weight", ".bias"} : std::vector<std::string>{".weight"};
}

// The weights that keep their tensor and change only their name; the embedding and the head
// have their vocabulary cut or padded on the way, and q, k, v and the experts change shape.
std::vector<std::pair<std::string, std::string>> renamed(const ModelConfig& model, const DecoderFormat& format) {
  std::vector<std::pair<std::string, std::string>> out = {{"wte.weight", "model.embed_tokens.weight"},
                                                          {"ln_f.weight", "model.norm.weight"}};
  if (model.untie_embeddings_and_output_weights) out.push_back({"lm_head.weight", "lm_head.weight"});
  for (int64_t i = 0; i < model.num_layers; ++i) {
    const std::string t = str("h", i, "."), hf = str("model.layers.", i, ".");
    out.push_back({t + "ln_1.weight", hf + "input_layernorm.weight"});
    out.push_back({t + "ln_2.weight", hf + "post_attention_layernorm.weight"});
    if (format.qk_norm)
      for (const char* n : {"q_norm", "k_norm"}) out.push_back({t + "attn." + n + ".weight", hf + "self_attn." + n + ".weight"});
    if (model.moe_layer(i)) out.push_back({t + "moe.router", hf + format.experts->block + ".gate.weight"});
    for (const auto& kind : linear_tensors(model)) {
      out.push_back({t + "attn.out" + kind, hf + "self_attn.o_proj" + kind});
      if (!model.moe_layer(i))
        for (const char* p : {"gate", "up", "down"}) out.push_back({t + "mlp." + p + kind, hf + "mlp." + p + "_proj" + kind});
    }
  }
  return out;
}

bool cut_to_vocabulary(const std::string& trident_name) {
  return trident_name == "wte.weight" || trident_name == "lm_head.weight";
}

// Layer i's experts: trident's stacked [E, ...] tensor by projection, and each expert's HF name.
struct ExpertTensor {
  std::string trident_name;
  std::function<std::string(int64_t expert)> hf_name;
  std::vector<int64_t> shape;  // one expert's
};
std::vector<ExpertTensor> expert_tensors(const ModelConfig& model, const ExpertNames& names, int64_t layer) {
  const int64_t h = model.hidden_size, f = model.moe_ffn();
  const std::string t = str("h", layer, ".moe."), hf = str("model.layers.", layer, ".", names.block, ".experts.");
  const auto named = [hf](const std::string& projection) {
    return [hf, projection](int64_t e) { return str(hf, e, ".", projection, ".weight"); };
  };
  return {{t + "gate", named(names.gate), {f, h}}, {t + "up", named(names.up), {f, h}}, {t + "down", named(names.down), {h, f}}};
}

// trident's QKV rows (or bias entries), group by group [q of a/g heads | k | v] of d each,
// <-> HF's separate q [a d], k [g d] and v [g d], head by head.
struct SeparateQkv {
  torch::Tensor q, k, v;
};
SeparateQkv split_qkv(const torch::Tensor& qkv, const ModelConfig& m) {
  const int64_t g = m.query_groups(), r = m.num_attention_heads / g, d = m.head_dim();
  std::vector<int64_t> grouped = {g, r + 2, d};
  for (int64_t i = 1; i < qkv.dim(); ++i) grouped.push_back(qkv.size(i));
  const auto t = qkv.reshape(grouped);
  auto rows = [&](int64_t count) {
    std::vector<int64_t> shape = {count * d};
    for (int64_t i = 1; i < qkv.dim(); ++i) shape.push_back(qkv.size(i));
    return shape;
  };
  return {t.narrow(1, 0, r).reshape(rows(g * r)), t.narrow(1, r, 1).reshape(rows(g)), t.narrow(1, r + 1, 1).reshape(rows(g))};
}
torch::Tensor join_qkv(const SeparateQkv& s, const ModelConfig& m) {
  const int64_t g = m.query_groups(), r = m.num_attention_heads / g, d = m.head_dim();
  auto grouped = [&](const torch::Tensor& t, int64_t per_group) {
    std::vector<int64_t> shape = {g, per_group, d};
    for (int64_t i = 1; i < t.dim(); ++i) shape.push_back(t.size(i));
    return t.reshape(shape);
  };
  const auto joined = torch::cat({grouped(s.q, r), grouped(s.k, 1), grouped(s.v, 1)}, 1);
  std::vector<int64_t> shape = {m.qkv_rows()};
  for (int64_t i = 1; i < s.q.dim(); ++i) shape.push_back(s.q.size(i));
  return joined.reshape(shape);
}

json llama3_rope_scaling() {
  using S = Llama3RopeScaling;
  return {{"rope_type", "llama3"},
          {"factor", S::factor},
          {"low_freq_factor", S::low_freq_factor},
          {"high_freq_factor", S::high_freq_factor},
          {"original_max_position_embeddings", S::original_max_position_embeddings}};
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-12 * std::abs(b); }

// transformers 5's rope_parameters (RoPE's theta and scaling together), or null: earlier
// versions, and most checkpoints on the Hub, keep rope_theta and rope_scaling at the top level.
json rope_parameters(const json& config) {
  const bool modern = config.contains("rope_parameters") && config.at("rope_parameters").is_object();
  return modern ? config.at("rope_parameters") : json();
}

// RoPE's scaling as config.json states it, null when none: in rope_parameters or rope_scaling,
// its kind in rope_type or, older, type; "default" is none.
json stated_rope_scaling(const json& config) {
  const json parameters = rope_parameters(config);
  json scaling = parameters.is_object() ? parameters : config.value("rope_scaling", json());
  if (scaling.is_null()) return json();
  const std::string type = scaling.value("rope_type", scaling.value("type", "default"));
  if (type == "default") return json();
  scaling.erase("rope_theta");
  scaling.erase("type");
  scaling["rope_type"] = type;
  return scaling;
}

// Every setting `expected` has, `stated` has too, equal (numbers to rounding).
bool same_rope_scaling(const json& stated, const json& expected) {
  if (stated.is_null() || expected.is_null()) return stated.is_null() && expected.is_null();
  for (const auto& [key, value] : expected.items()) {
    if (!stated.contains(key)) return false;
    const json& found = stated.at(key);
    if (value.is_string() ? found != value : !found.is_number() || !close(found.get<double>(), value.get<double>()))
      return false;
  }
  return true;
}

// Numbers compare by value (2 and 2.0 alike), everything else exactly.
bool same_value(const json& found, const json& expected) {
  if (found.is_number() && expected.is_number()) return close(found.get<double>(), expected.get<double>());
  return found == expected;
}

NamedTensors export_weights(const DecoderFormat& format, const NamedTensors& weights, const ModelConfig& model,
                             torch::Dtype dtype) {
  const auto weight = [&](const std::string& name) {
    const auto found = weights.find(name);
    if (found == weights.end()) fail("the checkpoint has no weight '", name, "'");
    return found->second;
  };
  NamedTensors out;
  const auto put = [&](const std::string& name, const torch::Tensor& t) { out[name] = t.to(dtype).contiguous(); };
  for (const auto& [trident_name, hf_name] : renamed(model, format)) {
    const auto t = weight(trident_name);
    put(hf_name, cut_to_vocabulary(trident_name) ? t.narrow(0, 0, model.vocab_size) : t);
  }
  for (int64_t i = 0; i < model.num_layers; ++i) {
    for (const auto& kind : linear_tensors(model)) {
      const auto s = split_qkv(weight(str("h", i, ".attn.qkv", kind)), model);
      const std::string hf = str("model.layers.", i, ".self_attn.");
      put(hf + "q_proj" + kind, s.q);
      put(hf + "k_proj" + kind, s.k);
      put(hf + "v_proj" + kind, s.v);
    }
    if (model.moe_layer(i))
      for (const ExpertTensor& e : expert_tensors(model, *format.experts, i)) {
        const auto stacked = weight(e.trident_name);
        for (int64_t expert = 0; expert < model.num_moe_experts; ++expert) put(e.hf_name(expert), stacked[expert]);
      }
  }
  return out;
}

std::string config_json(const DecoderFormat& format, const ModelConfig& model, int64_t end_of_document,
                        torch::Dtype dtype) {
  json config = {{"architectures", {format.architecture}},
                 {"model_type", format.model_type},
                 {"vocab_size", model.vocab_size},
                 {"hidden_size", model.hidden_size},
                 {"num_hidden_layers", model.num_layers},
                 {"num_attention_heads", model.num_attention_heads},
                 {"num_key_value_heads", model.query_groups()},
                 {"head_dim", model.head_dim()},
                 {"hidden_act", "silu"},
                 // The context the model is meant for: trident's sequence, or the one Llama 3.1's
                 // scaling stretches the original context to (which transformers expects).
                 {"max_position_embeddings",
                  model.rope_scaling == RopeScaling::llama3
                      ? std::max<int64_t>(model.seq_length, int64_t(Llama3RopeScaling::factor) *
                                                                Llama3RopeScaling::original_max_position_embeddings)
                      : model.seq_length},
                 {"rms_norm_eps", model.layernorm_epsilon},
                 {"rope_theta", model.rope_theta},
                 {"rope_scaling", model.rope_scaling == RopeScaling::llama3 ? llama3_rope_scaling() : json()},
                 {"attention_bias", model.add_bias_linear},
                 {"attention_dropout", model.attention_dropout},
                 {"tie_word_embeddings", !model.untie_embeddings_and_output_weights},
                 {"initializer_range", model.init_method_std},
                 {"bos_token_id", end_of_document},
                 {"eos_token_id", end_of_document},
                 {"torch_dtype", hf_dtype_name(dtype)}};
  for (const FamilyKey& key : format.keys(model)) config[key.hf_keys.front()] = key.expected;
  return config.dump(2) + "\n";
}

// Fails unless config.json in `dir` describes `model` (the error names the HF key and the
// trident key that differ).
void check_config(const DecoderFormat& format, const std::string& dir, const ModelConfig& model,
                  const std::string& option) {
  const json config = read_hf_config(dir, option);
  const auto differs = [&](const std::string& hf_key, const json& found, const std::string& trident_key,
                           const json& expected) {
    fail(option, ": '", dir, "/config.json' has ", hf_key, "=", found.dump(), " but ", trident_key, " asks for ",
         expected.dump());
  };
  const auto expect = [&](const char* hf_key, const json& found, const std::string& trident_key, const json& expected) {
    if (found != expected) differs(hf_key, found, trident_key, expected);
  };
  try {
    expect("model_type", config.value("model_type", json()), str("trident's ", format.name, " architecture"),
           format.model_type);
    expect("num_hidden_layers", config.at("num_hidden_layers"), "model.num_layers", model.num_layers);
    expect("hidden_size", config.at("hidden_size"), "model.hidden_size", model.hidden_size);
    expect("num_attention_heads", config.at("num_attention_heads"), "model.num_attention_heads",
           model.num_attention_heads);
    expect("num_key_value_heads", config.value("num_key_value_heads", config.at("num_attention_heads")),
           "model.num_query_groups", model.query_groups());
    const json head_dim = config.value("head_dim", json());
    const json stated_head_dim = head_dim.is_null() ? json(config.at("hidden_size").get<int64_t>() /
                                                           config.at("num_attention_heads").get<int64_t>())
                                                    : head_dim;
    expect("head_dim", stated_head_dim, model.kv_channels > 0 ? "model.kv_channels" : "model.hidden_size / model.num_attention_heads",
           model.head_dim());
    expect("hidden_act", config.value("hidden_act", json("silu")), "model.activation=swiglu (SiLU)", "silu");
    expect("attention_bias", config.value("attention_bias", false), "model.add_bias_linear", model.add_bias_linear);
    expect("tie_word_embeddings", config.value("tie_word_embeddings", false),
           "model.untie_embeddings_and_output_weights (negated)", !model.untie_embeddings_and_output_weights);
    if (config.at("vocab_size").get<int64_t>() > model.vocab_size)
      differs("vocab_size", config.at("vocab_size"), "model.vocab_size (at most)", model.vocab_size);
    const double epsilon = config.at("rms_norm_eps").get<double>();
    if (!close(epsilon, model.layernorm_epsilon))
      differs("rms_norm_eps", epsilon, "model.layernorm_epsilon", model.layernorm_epsilon);
    for (const char* key : {"rope_parameters", "rope_scaling"})
      if (config.contains(key) && !config.at(key).is_null() && !config.at(key).is_object())
        differs(key, config.at(key), "trident's RoPE settings", "an object");
    const json parameters = rope_parameters(config);
    const json& holder = parameters.is_object() ? parameters : config;
    const double theta = holder.value("rope_theta", config.value("rope_theta", 10000.0));
    if (!close(theta, model.rope_theta)) differs("rope_theta", theta, "model.rope_theta", model.rope_theta);
    const json scaling = stated_rope_scaling(config);
    const json expected = model.rope_scaling == RopeScaling::llama3 ? llama3_rope_scaling() : json();
    if (!same_rope_scaling(scaling, expected))
      differs("rope_scaling", scaling, str("model.rope_scaling=", model.rope_scaling), expected);
    for (const FamilyKey& key : format.keys(model)) {
      if (!key.checked) continue;
      const auto stated = std::find_if(key.hf_keys.begin(), key.hf_keys.end(),
                                       [&](const std::string& name) { return config.contains(name); });
      if (stated == key.hf_keys.end() && !key.absent)
        fail(option, ": '", dir, "/config.json' lacks ", key.hf_keys.front(), ", which ", format.name, " models have (",
             key.trident_key, " asks for ", key.expected.dump(), ")");
      const json found = stated == key.hf_keys.end() ? *key.absent : config.at(*stated);
      if (!same_value(found, key.expected))
        differs(stated == key.hf_keys.end() ? key.hf_keys.front() : *stated, found, key.trident_key, key.expected);
    }
  } catch (const json::out_of_range& e) {
    fail(option, ": '", dir, "/config.json' lacks a ", format.name, " key: ", e.what());
  } catch (const json::exception& e) {
    fail(option, ": '", dir, "/config.json' has a value of the wrong type: ", e.what());
  }
}

NamedTensors import_weights(const DecoderFormat& format, const std::string& dir, const ModelConfig& model) {
  const std::string option = "train.init_from";
  check_config(format, dir, model, option);
  HfWeightFiles files(dir, option);
  // Read, and checked against config.json's model before it is regrouped.
  const auto read_shaped = [&](const std::string& name, const std::vector<int64_t>& expected) {
    torch::Tensor t = files.read(name);
    if (t.sizes().vec() != expected)
      fail(option, ": '", files.description(), "' holds ", name, " of shape ", t.sizes(),
           " where config.json's model asks for ", torch::IntArrayRef(expected));
    return t;
  };
  NamedTensors out;
  for (const auto& [trident_name, hf_name] : renamed(model, format)) out[trident_name] = files.read(hf_name).contiguous();
  for (int64_t i = 0; i < model.num_layers; ++i) {
    for (const auto& kind : linear_tensors(model)) {
      const std::string hf = str("model.layers.", i, ".self_attn.");
      const auto projection = [&](const char* name, int64_t heads) {
        std::vector<int64_t> shape = {heads * model.head_dim()};
        if (kind == ".weight") shape.push_back(model.hidden_size);
        return read_shaped(hf + name + kind, shape);
      };
      out[str("h", i, ".attn.qkv", kind)] =
          join_qkv({projection("q_proj", model.num_attention_heads), projection("k_proj", model.query_groups()),
                    projection("v_proj", model.query_groups())},
                   model);
    }
    if (model.moe_layer(i))
      for (const ExpertTensor& e : expert_tensors(model, *format.experts, i)) {
        std::vector<torch::Tensor> experts;
        for (int64_t expert = 0; expert < model.num_moe_experts; ++expert)
          experts.push_back(read_shaped(e.hf_name(expert), e.shape));
        out[e.trident_name] = torch::stack(experts);
      }
  }
  return out;
}

// What every Llama-like decoder needs, then what the format's own attention and MLPs need.
std::string unheld_setting(const DecoderFormat& format, const ModelConfig& model) {
  if (model.block != "transformer") return str("model.block=", model.block);
  if (model.normalization != Normalization::rmsnorm) return str("model.normalization=", model.normalization);
  if (model.position_embedding_type != PositionEmbeddingType::rope)
    return str("model.position_embedding_type=", model.position_embedding_type);
  if (model.activation != Activation::swiglu) return str("model.activation=", model.activation);
  if (model.qk_layernorm != format.qk_norm) return str("model.qk_layernorm=", model.qk_layernorm ? "true" : "false");
  if (!format.experts && model.num_moe_experts > 0) return str("model.num_moe_experts=", model.num_moe_experts);
  if (format.experts && model.num_moe_experts == 0) return "model.num_moe_experts=0";
  if (!format.mlp_bias && model.add_bias_linear) return "model.add_bias_linear=true";
  return format.unheld_setting(model);
}

}  // namespace

std::string plain_routing_unheld_setting(const ModelConfig& m) {
  if (m.moe_router_score_function != RouterScore::softmax)
    return str("model.moe_router_score_function=", m.moe_router_score_function);
  if (m.moe_router_topk_scaling_factor > 0)
    return str("model.moe_router_topk_scaling_factor=", m.moe_router_topk_scaling_factor);
  if (m.moe_router_enable_expert_bias) return "model.moe_router_enable_expert_bias=true";
  if (m.moe_shared_expert_intermediate_size > 0)
    return str("model.moe_shared_expert_intermediate_size=", m.moe_shared_expert_intermediate_size);
  if (m.moe_layer_freq != 1) return str("model.moe_layer_freq=", m.moe_layer_freq);
  return "";
}

Family decoder_family(DecoderFormat format) {
  TRIDENT_CHECK(format.unheld_setting && format.keys, "a decoder format needs its unheld_setting and keys");
  return {format.model_type, [format](const ModelConfig& model) { return unheld_setting(format, model); },
          [format](const NamedTensors& weights, const ModelConfig& model, torch::Dtype dtype) {
            return export_weights(format, weights, model, dtype);
          },
          [format](const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype) {
            return config_json(format, model, end_of_document, dtype);
          },
          [format](const std::string& dir, const ModelConfig& model) { return import_weights(format, dir, model); }};
}

}  // namespace trident
