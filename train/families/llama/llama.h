// The Llama family (train/families/family.h): Hugging Face's LlamaForCausalLM and trident's GPT
// with Llama's architecture (RMSNorm, RoPE, SwiGLU: llama_unheld_setting is "") hold the same
// weights under other names; this maps between them, for tools/export (trident -> HF) and
// train.init_from (HF -> trident, at any layout). Every HF weight is an nn.Linear's [out, in],
// as trident's.
//
//   trident                          HF (model.safetensors or its shards)
//   wte.weight [V_padded, h]         model.embed_tokens.weight [V, h]         padding rows dropped
//   h<i>.ln_1.weight                 model.layers.<i>.input_layernorm.weight
//   h<i>.attn.qkv.weight             model.layers.<i>.self_attn.q_proj.weight [a d, h],
//     [(a + 2g) d, h], by group:       k_proj.weight [g d, h], v_proj.weight [g d, h]
//     [q of its a/g heads | k | v]
//   h<i>.attn.out.weight [h, a d]    model.layers.<i>.self_attn.o_proj.weight
//   h<i>.ln_2.weight                 model.layers.<i>.post_attention_layernorm.weight
//   h<i>.mlp.gate / up / down        model.layers.<i>.mlp.gate_proj / up_proj / down_proj
//   ln_f.weight                      model.norm.weight
//   lm_head.weight [V_padded, h]     lm_head.weight [V, h]                    absent when tied
// and the biases beside their weights when model.add_bias_linear (HF's attention_bias and
// mlp_bias). Both rotate queries and keys by halves (rotate_half): no permutation of q and k.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "core/config.h"
#include "train/families/family.h"

namespace trident {

// trident's global weights (read_global_weights) -> HF's names, the vocabulary cut to
// model.vocab_size rows, in `dtype`.
std::map<std::string, torch::Tensor> to_hf_llama(const std::map<std::string, torch::Tensor>& weights,
                                                 const ModelConfig& model, torch::Dtype dtype);
// HF's config.json (its text) for such a model; `bos` and `eos` the tokenizer's ids.
std::string hf_llama_config(const ModelConfig& model, int64_t bos, int64_t eos, torch::Dtype dtype);

// Reads the folder `dir` (config.json, and model.safetensors or its shards), checks that
// config.json describes `model` (the error names the HF key and the trident key that differ),
// and returns trident's global weights by trident name; the embedding and an untied head with
// the HF vocabulary's rows (the rest of the padded vocabulary keeps its fresh values).
std::map<std::string, torch::Tensor> read_hf_llama(const std::string& dir, const ModelConfig& model);

// The first setting of `model` that Llama's architecture lacks (RMSNorm, rotary positions,
// SwiGLU; grouped queries, biases and an untied head are Llama's options), or "".
std::string llama_unheld_setting(const ModelConfig& model);
Family llama_family();

}  // namespace trident
