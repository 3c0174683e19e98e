// The Llama-like decoders Hugging Face ships (LlamaForCausalLM, Qwen3ForCausalLM,
// MixtralForCausalLM, Qwen3MoeForCausalLM): the same embedding, norms, attention and head under
// the same names, differing in per-head query/key norms, in their MLPs' names and in config.json's
// own keys. One map between them and trident's GPT with Llama's architecture (RMSNorm, RoPE,
// SwiGLU) serves them all; each family gives its DecoderFormat (train/families/<family>/).
//
//   trident                          HF (model.safetensors or its shards)
//   wte.weight [V_padded, h]         model.embed_tokens.weight [V, h]         padding rows dropped
//   h<i>.ln_1.weight                 model.layers.<i>.input_layernorm.weight
//   h<i>.attn.qkv.weight             model.layers.<i>.self_attn.q_proj.weight [a d, h],
//     [(a + 2g) d, h], by group:       k_proj.weight [g d, h], v_proj.weight [g d, h]
//     [q of its a/g heads | k | v]
//   h<i>.attn.q_norm.weight [d]      model.layers.<i>.self_attn.q_norm.weight  (and k_norm; Qwen3)
//   h<i>.attn.out.weight [h, a d]    model.layers.<i>.self_attn.o_proj.weight
//   h<i>.ln_2.weight                 model.layers.<i>.post_attention_layernorm.weight
//   h<i>.mlp.gate / up / down        model.layers.<i>.mlp.gate_proj / up_proj / down_proj
//   h<i>.moe.router [E, h]           model.layers.<i>.<block>.gate.weight
//   h<i>.moe.gate [E, f, h]          model.layers.<i>.<block>.experts.<e>.<gate>.weight [f, h], e < E
//   h<i>.moe.up [E, f, h]            ...experts.<e>.<up>.weight [f, h]
//   h<i>.moe.down [E, h, f]          ...experts.<e>.<down>.weight [h, f]
//   ln_f.weight                      model.norm.weight
//   lm_head.weight [V_padded, h]     lm_head.weight [V, h]                    absent when tied
// and the biases beside their weights when model.add_bias_linear (HF's attention_bias and
// mlp_bias). Both rotate queries and keys by halves (rotate_half): no permutation of q and k.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "train/families/family.h"

namespace trident {

// How a family names its Mixture-of-Experts MLPs (see the table above).
struct ExpertNames {
  std::string block;           // "block_sparse_moe" (Mixtral), "mlp" (Qwen3-MoE)
  std::string gate, up, down;  // "w1", "w3", "w2" (Mixtral); "gate_proj", "up_proj", "down_proj"
};

// One of config.json's keys that a family writes from the model and checks on import.
struct FamilyKey {
  std::vector<std::string> hf_keys;  // the name written, then other names it is read under
  std::string trident_key;           // what a mismatch names
  nlohmann::json expected;           // for this model
  // What a config.json without the key means (transformers' default); none: the key is required.
  std::optional<nlohmann::json> absent = std::nullopt;
  bool checked = true;  // false: written for the record only (a training setting, an unused width)
};

struct DecoderFormat {
  std::string model_type;    // config.json's, e.g. "qwen3_moe"
  std::string architecture;  // e.g. "Qwen3MoeForCausalLM"
  std::string name;          // for messages, e.g. "Qwen3-MoE"
  bool qk_norm = false;      // self_attn.q_norm and k_norm: the family has them, and model.qk_layernorm must say so
  std::optional<ExpertNames> experts;  // none: a dense family, which refuses experts
  bool mlp_bias = false;               // Llama's mlp_bias beside attention_bias; the others have no MLP biases
  // The first setting of a model this family's format cannot hold beyond what every Llama-like
  // decoder needs (checked first), or "".
  std::function<std::string(const ModelConfig& model)> unheld_setting;
  // The family's own config.json keys for `model`.
  std::function<std::vector<FamilyKey>(const ModelConfig& model)> keys;
};

// The Family (train/families/family.h) of a Llama-like decoder of `format`.
Family decoder_family(DecoderFormat format);

// The first setting of a Mixture-of-Experts `model` that a router with a softmax over all its
// experts, top k of them in every layer that has experts (moe_layer_freq 1), without shared
// experts, scaling or bias, cannot hold (Mixtral's and Qwen3-MoE's routing), or "".
std::string plain_routing_unheld_setting(const ModelConfig& model);

}  // namespace trident
