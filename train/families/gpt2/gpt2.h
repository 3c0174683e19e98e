// The GPT-2 family (train/families/family.h): Hugging Face's GPT2LMHeadModel and trident's GPT
// with GPT-2's architecture hold the same weights under other names and layouts; this maps
// between them, for tools/export (trident -> HF) and train.init_from (HF -> trident, at any
// layout).
//
//   trident                          HF (model.safetensors)                 layout change
//   wte.weight [V_padded, h]         transformer.wte.weight [V, h]          padding rows dropped
//   wpe.weight [s, h]                transformer.wpe.weight [n_positions, h]
//   h<i>.ln_1 / ln_2 .weight/.bias   transformer.h.<i>.ln_1 / ln_2 ...
//   h<i>.attn.qkv.weight [3h, h]     transformer.h.<i>.attn.c_attn.weight   rows [head][q|k|v][d]
//                                      [h, 3h] (Conv1D: [in, out])          -> columns [q|k|v][head][d],
//                                                                              transposed
//   h<i>.attn.qkv.bias [3h]          ... .attn.c_attn.bias [3h]             the same reordering
//   h<i>.attn.out.weight [h, h]      ... .attn.c_proj.weight [h, h]         transposed
//   h<i>.mlp.up.weight [f, h]        ... .mlp.c_fc.weight [h, f]            transposed
//   h<i>.mlp.down.weight [h, f]      ... .mlp.c_proj.weight [f, h]          transposed
//   ln_f.weight/.bias                transformer.ln_f.weight/.bias
// The head is tied to wte in both (HF's lm_head.weight is not stored). Both use the tanh GELU
// ("gelu_new"), pre-LayerNorm blocks and learned positions, so the same weights compute the
// same logits.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "core/config.h"
#include "train/families/family.h"

namespace trident {

// trident's global weights (read_global_weights) -> HF's names and layouts, the vocabulary cut
// to model.vocab_size rows, in `dtype`.
std::map<std::string, torch::Tensor> to_hf_gpt2(const std::map<std::string, torch::Tensor>& weights,
                                                const ModelConfig& model, torch::Dtype dtype);
// HF's config.json (its text) for such a model; `end_of_document` is the tokenizer's (bos and eos).
std::string hf_gpt2_config(const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype);

// Reads <dir>/model.safetensors (with or without the "transformer." prefix of the names) and
// <dir>/config.json, checks that they describe a model `model` can take (the error names the
// HF key and the trident key that differ), and returns trident's global weights: every
// parameter by its trident name, wte with the HF vocabulary's rows (fewer than the padded
// vocabulary: the rest keep their fresh values), wpe cut to model.seq_length rows.
std::map<std::string, torch::Tensor> read_hf_gpt2(const std::string& dir, const ModelConfig& model);

// Holds the models whose ModelConfig::non_standard_gpt_setting() is "".
Family gpt2_family();

}  // namespace trident
