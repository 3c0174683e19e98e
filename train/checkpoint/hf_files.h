// A Hugging Face model folder as save_pretrained writes it: config.json, and the weights in
// model.safetensors or, for large models, in shards listed by model.safetensors.index.json
// ({"weight_map": {tensor name: shard file}}).
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace trident {

class SafetensorsFile;

// config.json's torch_dtype for `dtype`: "float32", "bfloat16", "float16" or "float64".
const char* hf_dtype_name(torch::Dtype dtype);

// <dir>/config.json, parsed. Error naming `option` (the setting that named the folder) and the
// file when it is missing or not JSON.
nlohmann::json read_hf_config(const std::string& dir, const std::string& option);

// The folder's weights, by name; each shard is opened when first read from.
class HfWeightFiles {
 public:
  // Error naming `option` and the folder when it holds neither model.safetensors nor the index.
  HfWeightFiles(const std::string& dir, std::string option);
  ~HfWeightFiles();
  bool contains(const std::string& name) const;
  // Error naming `option`, the file and the tensor when it is not there.
  torch::Tensor read(const std::string& name);
  const std::string& description() const { return description_; }

 private:
  std::string dir_, option_, description_;
  std::map<std::string, std::string> shard_of_;  // tensor name -> file
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

}  // namespace trident
