#include "train/checkpoint/hf_files.h"

#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "train/checkpoint/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trident {

const char* hf_dtype_name(torch::Dtype dtype) {
  return dtype == torch::kDouble ? "float64" : dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kHalf ? "float16" : "float32";
}

json read_hf_config(const std::string& dir, const std::string& option) {
  const std::string path = (fs::path(dir) / "config.json").string();
  try {
    return json::parse(read_text_file(path, option + " config"));
  } catch (const json::exception& e) {
    fail(option, ": '", path, "' is not JSON: ", e.what());
  }
}

HfWeightFiles::HfWeightFiles(const std::string& dir, std::string option) : dir_(dir), option_(std::move(option)) {
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    description_ = single.string();
    auto file = std::make_unique<SafetensorsFile>(single.string());
    for (const auto& name : file->names()) shard_of_[name] = "model.safetensors";
    open_["model.safetensors"] = std::move(file);
    return;
  }
  if (!fs::exists(index))
    fail(option_, ": '", dir, "' holds neither model.safetensors nor model.safetensors.index.json");
  description_ = index.string();
  try {
    const json parsed = json::parse(read_text_file(index.string(), option_ + " index"));
    for (const auto& [name, shard] : parsed.at("weight_map").items()) shard_of_[name] = shard.get<std::string>();
  } catch (const json::exception& e) {
    fail(option_, ": '", index.string(), "' is not a safetensors index (a \"weight_map\" of names to files): ", e.what());
  }
}

HfWeightFiles::~HfWeightFiles() = default;

bool HfWeightFiles::contains(const std::string& name) const { return shard_of_.count(name) != 0; }

torch::Tensor HfWeightFiles::read(const std::string& name) {
  const auto shard = shard_of_.find(name);
  if (shard == shard_of_.end()) fail(option_, ": '", description_, "' has no tensor '", name, "'");
  auto& file = open_[shard->second];
  if (!file) file = std::make_unique<SafetensorsFile>((fs::path(dir_) / shard->second).string());
  return file->read(name);
}

}  // namespace trident
