// Hugging Face's safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// header (per tensor its dtype, shape and [begin, end) byte offsets into the data that follows;
// an optional "__metadata__" object of strings), padded with spaces to a multiple of 8, then
// every tensor's raw little-endian bytes.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/checksum.h"

namespace trident {

class Progress;

struct Safetensors {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;
};

// Writes `file` (its tensors in the order given, CPU copies of them), flushed to disk. Error
// naming the file or the tensor whose dtype the format lacks. Returns its size and checksum.
// `progress` (core/progress.h), when given, advances by each tensor's bytes as they are written.
FileDigest write_safetensors(const std::string& path, const Safetensors& file, Progress* progress = nullptr);
// The bytes of the file's tensors (what write_safetensors' progress counts up to).
int64_t tensor_bytes(const Safetensors& file);

// One file opened for reading tensors one at a time (checkpoints read only the pieces they
// need). The header is checked when the file is opened: Error naming the file and what is
// wrong (a header beyond the file, an unknown dtype, offsets that do not match a shape).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // in file order
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Error naming the file and tensor when it is not there or cannot be read.
  torch::Tensor read(const std::string& name) const;

 private:
  struct Entry {
    torch::Dtype dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // bytes, from the start of the data
  };
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Reads every tensor of a file (SafetensorsFile's errors).
Safetensors read_safetensors(const std::string& path);

}  // namespace trident
