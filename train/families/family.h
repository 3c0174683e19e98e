// A model family as Hugging Face knows it (a config.json "model_type": GPT2LMHeadModel's "gpt2",
// LlamaForCausalLM's "llama"), in one bundle: which trident settings its format holds, its
// config.json, and its weights' names and layouts both ways. trident's own families live in
// folders of their own (train/families/gpt2, train/families/llama) and are listed once, in
// family.cpp; a program adds its own with register_family, for its own calls of to_hugging_face
// and the rest and for train.init_from in its runs (the export program knows trident's). Nothing
// else names a family: export, train.init_from and the checks of both ask family_of.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"

namespace trident {

using NamedTensors = std::map<std::string, torch::Tensor>;

struct Family {
  std::string model_type;  // config.json's "model_type"
  // The first setting of a model that this family's format cannot hold (e.g.
  // "model.activation=swiglu"), or "" when it holds them all.
  std::function<std::string(const ModelConfig& model)> unheld_setting;
  // trident's global weights (read_global_weights) -> the family's names and layouts, the
  // vocabulary cut to model.vocab_size rows, in `dtype`.
  std::function<NamedTensors(const NamedTensors& weights, const ModelConfig& model, torch::Dtype dtype)> to_hugging_face;
  // config.json's text; `end_of_document` is the tokenizer's (bos and eos alike).
  std::function<std::string(const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype)> config_json;
  // A Hugging Face folder's weights by trident name, once its config.json is checked against
  // `model` (the error names the Hugging Face key and the trident key that differ).
  std::function<NamedTensors(const std::string& dir, const ModelConfig& model)> read;
};

// Adds a family, tried after those before it. Error for an empty model_type, a missing function
// or a model_type taken.
void register_family(Family family);
// trident's families, then the registered ones, in the order family_of tries them.
std::vector<Family> families();
// The first family whose format holds `model`; Error otherwise, naming for each family the
// setting it cannot hold, after `purpose` ("train.init_from reads Hugging Face models").
Family family_of(const ModelConfig& model, const std::string& purpose = "Hugging Face's formats");

// What tools/export writes and train.init_from reads, by the model's family:
// family_of(model).to_hugging_face and the rest.
NamedTensors to_hugging_face(const NamedTensors& weights, const ModelConfig& model, torch::Dtype dtype);
std::string hugging_face_config(const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype);
NamedTensors read_hugging_face(const std::string& dir, const ModelConfig& model);
// Error when train.init_from is set and no family holds the model, naming for each family the
// setting it cannot hold: the train program checks it with the config, before anything connects.
void check_init_from(const Config& config);

}  // namespace trident
