#include "train/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/files.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors stores little-endian bytes");

namespace trident {
namespace {

using nlohmann::json;

const std::vector<std::pair<torch::Dtype, const char*>>& dtype_names() {
  static const std::vector<std::pair<torch::Dtype, const char*>> names = {
      {torch::kDouble, "F64"}, {torch::kFloat, "F32"}, {torch::kHalf, "F16"}, {torch::kBFloat16, "BF16"},
      {torch::kLong, "I64"},   {torch::kInt, "I32"},   {torch::kShort, "I16"}, {torch::kChar, "I8"},
      {torch::kByte, "U8"},    {torch::kBool, "BOOL"}};
  return names;
}

}  // namespace

void write_safetensors(const std::string& path, const Safetensors& file) {
  json header = json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::vector<torch::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    const char* dtype = nullptr;
    for (const auto& [type, spelled] : dtype_names())
      if (type == tensor.scalar_type()) dtype = spelled;
    if (!dtype) fail("safetensors '", path, "': tensor '", name, "' has dtype ", tensor.scalar_type(), ", which the format lacks");
    auto bytes = tensor.detach().to(torch::kCPU).contiguous();
    const int64_t size = bytes.numel() * int64_t(bytes.element_size());
    header[name] = {{"dtype", dtype}, {"shape", bytes.sizes().vec()}, {"data_offsets", {offset, offset + size}}};
    offset += size;
    data.push_back(bytes);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t length = text.size();
  FileWriter writer(path);
  writer.write(&length, sizeof length);
  writer.write(text.data(), text.size());
  for (const auto& bytes : data) writer.write(bytes.data_ptr(), size_t(bytes.numel()) * bytes.element_size());
  writer.finish();
}

Safetensors read_safetensors(const std::string& path) {
  const std::string bytes = read_text_file(path, "safetensors file");
  auto bad = [&](const auto&... why) { fail("safetensors file '", path, "' ", why...); };
  uint64_t length = 0;
  if (bytes.size() < sizeof length) bad("is too short to hold a header");
  std::memcpy(&length, bytes.data(), sizeof length);
  if (length > bytes.size() - sizeof length) bad("declares a header of ", length, " bytes in a file of ", bytes.size());
  json header;
  try {
    header = json::parse(bytes.substr(sizeof length, length));
  } catch (const json::exception& e) {
    bad("has a header that is not JSON: ", e.what());
  }
  const size_t data_start = sizeof length + length, data_size = bytes.size() - data_start;
  Safetensors file;
  struct Entry {
    int64_t offset;  // in the data: the file's order
    std::string name;
    torch::Tensor tensor;
  };
  std::vector<Entry> entries;
  try {
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        file.metadata = entry.get<std::map<std::string, std::string>>();
        continue;
      }
      const std::string dtype = entry.at("dtype").get<std::string>();
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<int64_t>>();
      torch::Dtype type = torch::kFloat;
      bool known = false;
      for (const auto& [t, spelled] : dtype_names())
        if (dtype == spelled) type = t, known = true;
      if (!known) bad("gives tensor '", name, "' the unknown dtype '", dtype, "'");
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      const int64_t size = numel * int64_t(torch::elementSize(type));
      if (offsets.size() != 2 || offsets[0] < 0 || offsets[1] - offsets[0] != size || size_t(offsets[1]) > data_size)
        bad("gives tensor '", name, "' offsets that do not hold its ", numel, " elements of ", dtype);
      auto tensor = torch::empty(shape, torch::TensorOptions().dtype(type));
      std::memcpy(tensor.data_ptr(), bytes.data() + data_start + size_t(offsets[0]), size_t(size));
      entries.push_back({offsets[0], name, tensor});
    }
  } catch (const json::exception& e) {
    bad("has a malformed header: ", e.what());
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.offset < b.offset; });
  for (auto& e : entries) file.tensors.emplace_back(std::move(e.name), std::move(e.tensor));
  return file;
}

}  // namespace trident
