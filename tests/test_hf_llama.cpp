// train/families/decoder/decoder.h (Llama's map, and the MoE families'): the exported weights
// compute, in LlamaForCausalLM's arithmetic written out here independently of trident's model
// (separate q, k, v projections, repeated key/value heads, rotate_half), the logits trident
// computes; reading them back, from one file or from shards, gives the same weights; a
// config.json that does not fit is named.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/files.h"
#include "model/gpt.h"
#include "tests/helpers.h"
#include "train/checkpoint/safetensors.h"
#include "train/families/family.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::scratch_dir;
using trident::testing::tiny_llama;

namespace {

std::map<std::string, torch::Tensor> trained_like_weights(const ModelConfig& m) {
  GPT model(m, m.padded_vocab());
  model->to(torch::kDouble);
  model->initialize(7);
  std::map<std::string, torch::Tensor> out;
  torch::NoGradGuard no_grad;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value() + 0.1 * torch::randn_like(p.value());
  return out;
}

torch::Tensor trident_logits(const ModelConfig& m, const std::map<std::string, torch::Tensor>& weights,
                             const torch::Tensor& ids) {
  GPT model(m, m.padded_vocab());
  model->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) p.value().copy_(weights.at(p.key()));
  model->eval();
  return model->forward(ids).narrow(-1, 0, m.vocab_size);
}

// LlamaForCausalLM's forward as Hugging Face's modeling_llama computes it, on its own names.
torch::Tensor hf_logits(const std::map<std::string, torch::Tensor>& w, const ModelConfig& m, const torch::Tensor& ids) {
  const int64_t b = ids.size(0), s = ids.size(1), a = m.num_attention_heads, g = m.query_groups(), d = m.head_dim();
  auto linear = [&](const torch::Tensor& x, const std::string& name) {
    auto y = torch::matmul(x, w.at(name + ".weight").t());
    return w.count(name + ".bias") ? y + w.at(name + ".bias") : y;
  };
  auto rms = [&](const torch::Tensor& x, const std::string& name) {
    return w.at(name + ".weight") * (x * torch::rsqrt(x.pow(2).mean(-1, true) + m.layernorm_epsilon));
  };
  const auto inv_freq = 1.0 / torch::pow(m.rope_theta, torch::arange(0, d, 2, torch::kDouble) / double(d));
  const auto freqs = torch::outer(torch::arange(s, torch::kDouble), inv_freq);
  const auto emb = torch::cat({freqs, freqs}, -1);
  const auto cos = emb.cos(), sin = emb.sin();
  auto rotate_half = [](const torch::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  };
  auto x = w.at("model.embed_tokens.weight").index_select(0, ids.flatten()).view({b, s, -1});
  const auto causal = torch::ones({s, s}, torch::kBool).triu(1);
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string L = "model.layers." + std::to_string(i) + ".";
    const auto y = rms(x, L + "input_layernorm");
    auto q = linear(y, L + "self_attn.q_proj").view({b, s, a, d}).transpose(1, 2);
    auto k = linear(y, L + "self_attn.k_proj").view({b, s, g, d}).transpose(1, 2);
    auto v = linear(y, L + "self_attn.v_proj").view({b, s, g, d}).transpose(1, 2);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    k = k.repeat_interleave(a / g, 1);  // repeat_kv
    v = v.repeat_interleave(a / g, 1);
    const auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(d));
    const auto context = torch::matmul(scores.masked_fill(causal, -INFINITY).softmax(-1), v);
    x = x + linear(context.transpose(1, 2).reshape({b, s, -1}), L + "self_attn.o_proj");
    const auto z = rms(x, L + "post_attention_layernorm");
    x = x + linear(torch::silu(linear(z, L + "mlp.gate_proj")) * linear(z, L + "mlp.up_proj"), L + "mlp.down_proj");
  }
  const auto head = w.count("lm_head.weight") ? w.at("lm_head.weight") : w.at("model.embed_tokens.weight");
  return torch::matmul(rms(x, "model.norm"), head.t());
}

// A folder as save_pretrained writes it: config.json and the weights in one file, or in two
// shards and their index.
std::string export_folder(const std::map<std::string, torch::Tensor>& hf, const ModelConfig& m, bool sharded = false) {
  const auto dir = scratch_dir();
  Safetensors first, second;
  nlohmann::json map;
  for (const auto& [name, t] : hf) {
    const bool later = sharded && name.find("layers.1.") != std::string::npos;
    (later ? second : first).tensors.emplace_back(name, t);
    map[name] = later ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  if (sharded) {
    write_safetensors((dir / "model-00001-of-00002.safetensors").string(), first);
    write_safetensors((dir / "model-00002-of-00002.safetensors").string(), second);
    write_text_file((dir / "model.safetensors.index.json").string(), nlohmann::json{{"weight_map", map}}.dump());
  } else {
    write_safetensors((dir / "model.safetensors").string(), first);
  }
  write_text_file((dir / "config.json").string(), hugging_face_config(m, 0, torch::kDouble));
  return dir.string();
}

// tiny_llama, and the same with biases and a tied head.
std::vector<ModelConfig> variants() {
  ModelConfig tied = tiny_llama();
  tied.add_bias_linear = true;
  tied.untie_embeddings_and_output_weights = false;
  return {tiny_llama(), tied};
}

}  // namespace

TEST(HfLlama, ExportedWeightsComputeTheSameLogits) {
  for (const ModelConfig& m : variants()) {
    SCOPED_TRACE(m.add_bias_linear ? "biases, tied" : "no biases, untied");
    const auto weights = trained_like_weights(m);
    const auto hf = to_hugging_face(weights, m, torch::kDouble);
    EXPECT_EQ(hf.size(), (m.add_bias_linear ? 2u + 16u * 2 : 3u + 9u * 2));
    EXPECT_EQ(hf.at("model.embed_tokens.weight").sizes(), torch::IntArrayRef({50, 16}));  // unpadded
    EXPECT_EQ(hf.at("model.layers.0.self_attn.q_proj.weight").sizes(), torch::IntArrayRef({16, 16}));
    EXPECT_EQ(hf.at("model.layers.0.self_attn.k_proj.weight").sizes(), torch::IntArrayRef({8, 16}));  // 2 groups of 4
    // Query head 3 is the second of group 1: trident's row 1 * (2 + 2) * 4 + 1 * 4 + 2, HF's row 3 * 4 + 2;
    // group 1's value: trident's row 1 * 16 + 3 * 4 + 1, HF's v_proj row 1 * 4 + 1.
    const auto& qkv = weights.at("h0.attn.qkv.weight");
    EXPECT_TRUE(torch::equal(hf.at("model.layers.0.self_attn.q_proj.weight")[14], qkv[22]));
    EXPECT_TRUE(torch::equal(hf.at("model.layers.0.self_attn.v_proj.weight")[5], qkv[29]));

    const auto ids = torch::tensor({3, 17, 49, 0, 8, 8, 21, 5, 40, 1, 2, 3}, torch::kLong).view({2, 6});
    const auto expected = trident_logits(m, weights, ids);
    const auto got = hf_logits(hf, m, ids);
    EXPECT_LT((got - expected).abs().max().item<double>(), 1e-12 * expected.abs().max().item<double>());
  }
}

TEST(HfLlama, ImportGivesBackTheWeightsFromOneFileOrShards) {
  for (const ModelConfig& m : variants())
    for (bool sharded : {false, true}) {
      SCOPED_TRACE(str(m.add_bias_linear ? "tied" : "untied", sharded ? ", sharded" : ""));
      const auto original = trained_like_weights(m);
      const auto read = read_hugging_face(export_folder(to_hugging_face(original, m, torch::kDouble), m, sharded), m);
      EXPECT_EQ(read.size(), original.size());
      for (const auto& [name, value] : read) {
        const auto& want = original.at(name);
        const bool vocabulary = name == "wte.weight" || name == "lm_head.weight";
        EXPECT_TRUE(torch::equal(value, vocabulary ? want.narrow(0, 0, m.vocab_size) : want)) << name;
      }
    }
}

TEST(HfLlama, AConfigThatDoesNotFitIsNamed) {
  const ModelConfig m = tiny_llama();
  const std::string dir = export_folder(to_hugging_face(trained_like_weights(m), m, torch::kDouble), m);
  const auto config = nlohmann::json::parse(read_text_file(dir + "/config.json", "config"));
  const auto message_for = [&](const nlohmann::json& variant, const ModelConfig& model) {
    write_text_file(dir + "/config.json", variant.dump());
    return error_of([&] { read_hugging_face(dir, model); });
  };
  const std::pair<std::pair<std::string, nlohmann::json>, std::string> cases[] = {
      {{"num_key_value_heads", 4}, "has num_key_value_heads=4 but model.num_query_groups asks for 2"},
      {{"intermediate_size", 64}, "has intermediate_size=64 but model.ffn_hidden_size asks for 40"},
      {{"hidden_act", "gelu"}, "has hidden_act=\"gelu\" but model.activation=swiglu (SiLU) asks for \"silu\""},
      {{"rope_theta", 500000.0}, "has rope_theta=500000.0 but model.rope_theta asks for 10000.0"},
      {{"tie_word_embeddings", true}, "has tie_word_embeddings=true but model.untie_embeddings_and_output_weights"},
      {{"attention_bias", true}, "has attention_bias=true but model.add_bias_linear asks for false"},
      {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}},
       "has rope_scaling={\"factor\":2.0,\"rope_type\":\"linear\"} but model.rope_scaling=none asks for null"},
      {{"model_type", "mistral"}, "has model_type=\"mistral\" but trident's Llama architecture asks for \"llama\""},
  };
  for (const auto& [change, expected] : cases) {
    auto variant = config;
    variant[change.first] = change.second;
    const auto message = message_for(variant, m);
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  // transformers 5 writes RoPE's settings as rope_parameters; Llama 3.1's scaling in either form.
  ModelConfig scaled = m;
  scaled.rope_theta = 500000;
  scaled.rope_scaling = RopeScaling::llama3;
  auto modern = config;
  modern.erase("rope_theta");
  modern.erase("rope_scaling");
  modern["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                               {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192}};
  write_text_file(dir + "/config.json", modern.dump());
  EXPECT_EQ(read_hugging_face(dir, scaled).size(), 3u + 7u * 2);  // trident's names: q, k and v in one
  EXPECT_NE(message_for(modern, m).find("has rope_theta=500000.0 but model.rope_theta asks for 10000.0"),
            std::string::npos);
  modern["rope_parameters"]["factor"] = 16.0;
  EXPECT_NE(message_for(modern, scaled).find("but model.rope_scaling=llama3 asks for"), std::string::npos);
  // Values of the wrong kind, and tensors that do not fit config.json, are named too.
  auto wrong = config;
  wrong["rope_parameters"] = 5;
  EXPECT_NE(message_for(wrong, m).find("has rope_parameters=5 but trident's RoPE settings asks for \"an object\""),
            std::string::npos);
  wrong = config;
  wrong["rope_theta"] = "large";
  EXPECT_NE(message_for(wrong, m).find("config.json' has a value of the wrong type"), std::string::npos);
  write_text_file(dir + "/config.json", config.dump());
  Safetensors file = read_safetensors(dir + "/model.safetensors");
  for (auto& [name, tensor] : file.tensors)
    if (name == "model.layers.0.self_attn.k_proj.weight") tensor = tensor.narrow(0, 0, 4);
  write_safetensors(dir + "/model.safetensors", file);
  EXPECT_NE(error_of([&] { read_hugging_face(dir, m); })
                .find("holds model.layers.0.self_attn.k_proj.weight of shape [4, 16] where config.json's model asks for [8, 16]"),
            std::string::npos);
  // A GPT-2 config.json for a Llama, and a model neither format holds.
  ModelConfig neither = m;
  neither.normalization = Normalization::layernorm;
  EXPECT_NE(error_of([&] { read_hugging_face(dir, neither); })
                .find("train.init_from reads Hugging Face models, but their formats cannot hold this model: "
                      "model.position_embedding_type=rope is not gpt2's, model.normalization=layernorm is not llama's"),
            std::string::npos);
}

// The MoE families (train/families/mixtral, qwen3_moe): each expert's projections as tensors of
// their own, read back into trident's stacked ones; config.json's own keys checked by name, a key
// absent meaning transformers' default, and a missing required one named.
TEST(HfMoe, ExpertsGoBothWaysAndTheirConfigKeysAreChecked) {
  ModelConfig mixtral = trident::testing::tiny_moe();
  mixtral.moe_shared_expert_intermediate_size = 0;  // neither family has one
  mixtral.moe_layer_freq = 1;
  ModelConfig qwen = mixtral;
  qwen.qk_layernorm = true;
  qwen.kv_channels = 6;
  qwen.moe_first_dense_layers = 1;
  qwen.moe_router_pre_softmax = true;
  for (const ModelConfig& m : {mixtral, qwen}) {
    const bool is_qwen = m.qk_layernorm;
    SCOPED_TRACE(is_qwen ? "qwen3_moe" : "mixtral");
    const auto original = trained_like_weights(m);
    const auto hf = to_hugging_face(original, m, torch::kDouble);
    const std::string block = is_qwen ? "mlp" : "block_sparse_moe", up = is_qwen ? "up_proj" : "w3";
    ASSERT_EQ(hf.count(str("model.layers.1.", block, ".experts.3.", up, ".weight")), 1u);
    EXPECT_TRUE(torch::equal(hf.at(str("model.layers.1.", block, ".experts.3.", up, ".weight")),
                             original.at("h1.moe.up")[3]));
    EXPECT_EQ(hf.count("model.layers.0.mlp.up_proj.weight"), is_qwen ? 1u : 0u);  // Qwen's dense first layer
    const std::string dir = export_folder(hf, m);
    const auto read = read_hugging_face(dir, m);
    EXPECT_EQ(read.size(), original.size());
    for (const auto& [name, value] : read) {
      const auto& want = original.at(name);
      const bool vocabulary = name == "wte.weight" || name == "lm_head.weight";
      EXPECT_TRUE(torch::equal(value, vocabulary ? want.narrow(0, 0, m.vocab_size) : want)) << name;
    }
    const auto config = nlohmann::json::parse(read_text_file(dir + "/config.json", "config"));
    const auto message_for = [&](const nlohmann::json& variant) {
      write_text_file(dir + "/config.json", variant.dump());
      return error_of([&] { read_hugging_face(dir, m); });
    };
    const std::string experts_key = is_qwen ? "num_experts" : "num_local_experts";
    auto variant = config;
    variant[experts_key] = 8;
    EXPECT_NE(message_for(variant).find("has " + experts_key + "=8 but model.num_moe_experts asks for 4"),
              std::string::npos);
    variant = config;
    variant.erase("num_experts_per_tok");
    EXPECT_NE(message_for(variant).find("lacks num_experts_per_tok, which"), std::string::npos);
    variant = config;
    variant["head_dim"] = 8;
    EXPECT_NE(message_for(variant).find(is_qwen ? "has head_dim=8 but model.kv_channels asks for 6"
                                                : "has head_dim=8 but model.hidden_size / model.num_attention_heads asks for 4"),
              std::string::npos);
    if (is_qwen) {
      variant = config;
      variant.erase("norm_topk_prob");  // transformers' default, false, is pre-softmax routing: still this model
      write_text_file(dir + "/config.json", variant.dump());
      EXPECT_EQ(read_hugging_face(dir, m).size(), original.size());
      variant["norm_topk_prob"] = true;
      EXPECT_NE(message_for(variant).find("has norm_topk_prob=true but model.moe_router_pre_softmax (negated) asks for false"),
                std::string::npos);
      variant = config;
      variant["mlp_only_layers"] = nlohmann::json::array();
      EXPECT_NE(message_for(variant).find("has mlp_only_layers=[] but model.moe_first_dense_layers"), std::string::npos);
    } else {
      variant = config;
      variant["router_jitter_noise"] = 0.1;
      EXPECT_NE(message_for(variant).find("has router_jitter_noise=0.1 but trident's router (no jitter) asks for 0.0"),
                std::string::npos);
    }
  }
}
