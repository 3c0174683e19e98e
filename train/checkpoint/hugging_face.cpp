#include "train/checkpoint/hugging_face.h"

#include "core/error.h"
#include "train/checkpoint/hf_gpt2.h"
#include "train/checkpoint/hf_llama.h"

namespace trident {

std::string hf_model_type(const ModelConfig& model) {
  if (const std::string problem = model.hugging_face_problem(); !problem.empty())
    fail("Hugging Face's GPT-2 and Llama formats cannot hold this model: ", problem);
  return model.non_gpt2_setting().empty() ? "gpt2" : "llama";
}

std::map<std::string, torch::Tensor> to_hugging_face(const std::map<std::string, torch::Tensor>& weights,
                                                     const ModelConfig& model, torch::Dtype dtype) {
  return hf_model_type(model) == "gpt2" ? to_hf_gpt2(weights, model, dtype) : to_hf_llama(weights, model, dtype);
}

std::string hugging_face_config(const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype) {
  return hf_model_type(model) == "gpt2" ? hf_gpt2_config(model, end_of_document, dtype)
                                        : hf_llama_config(model, end_of_document, end_of_document, dtype);
}

std::map<std::string, torch::Tensor> read_hugging_face(const std::string& dir, const ModelConfig& model) {
  return hf_model_type(model) == "gpt2" ? read_hf_gpt2(dir, model) : read_hf_llama(dir, model);
}

}  // namespace trident
