// A model's Hugging Face form, chosen by its architecture (core/config.h): GPT2LMHeadModel for
// GPT-2's (hf_gpt2.h), LlamaForCausalLM for Llama's (hf_llama.h). tools/export writes it,
// train.init_from reads it.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "core/config.h"

namespace trident {

// "gpt2" or "llama" (config.json's model_type); Error naming the keys when neither holds `model`.
std::string hf_model_type(const ModelConfig& model);

// trident's global weights -> HF's names and layouts, in `dtype`.
std::map<std::string, torch::Tensor> to_hugging_face(const std::map<std::string, torch::Tensor>& weights,
                                                     const ModelConfig& model, torch::Dtype dtype);
// config.json's text; `end_of_document` is the tokenizer's (GPT-2's bos and eos alike).
std::string hugging_face_config(const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype);
// The folder's weights by trident name, after checking that its config.json describes `model`.
std::map<std::string, torch::Tensor> read_hugging_face(const std::string& dir, const ModelConfig& model);

}  // namespace trident
