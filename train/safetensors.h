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

namespace trident {

struct Safetensors {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;
};

// Writes `file` (its tensors in the order given, CPU copies of them), flushed to disk. Error
// naming the file or the tensor whose dtype the format lacks.
void write_safetensors(const std::string& path, const Safetensors& file);
// Reads and checks a whole file: Error naming the file and what is wrong (a header beyond the
// file, an unknown dtype, offsets that do not match a tensor's shape).
Safetensors read_safetensors(const std::string& path);

}  // namespace trident
