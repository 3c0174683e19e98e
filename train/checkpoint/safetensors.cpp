#include "train/checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"

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

int64_t tensor_bytes(const Safetensors& file) {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : file.tensors) bytes += tensor.numel() * int64_t(tensor.element_size());
  return bytes;
}

FileDigest write_safetensors(const std::string& path, const Safetensors& file, Progress* progress) {
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
  for (const auto& bytes : data) {
    writer.write(bytes.data_ptr(), size_t(bytes.numel()) * bytes.element_size());
    if (progress) progress->advance(double(bytes.numel()) * double(bytes.element_size()));
  }
  return writer.finish();
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  auto bad = [&](const auto&... why) { fail("safetensors file '", path_, "' ", why...); };
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("safetensors file '", path_, "' cannot be read: ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd_, &info) != 0) bad("cannot be read: ", std::strerror(errno));
  const uint64_t file_size = uint64_t(info.st_size);
  uint64_t length = 0;
  if (file_size < sizeof length || ::pread(fd_, &length, sizeof length, 0) != ssize_t(sizeof length))
    bad("is too short to hold a header");
  if (length > file_size - sizeof length) bad("declares a header of ", length, " bytes in a file of ", file_size);
  std::string text(length, '\0');
  if (::pread(fd_, text.data(), length, sizeof length) != ssize_t(length)) bad("cannot be read: ", std::strerror(errno));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    bad("has a header that is not JSON: ", e.what());
  }
  data_start_ = sizeof length + length;
  const uint64_t data_size = file_size - data_start_;
  try {
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        metadata_ = entry.get<std::map<std::string, std::string>>();
        continue;
      }
      const std::string dtype = entry.at("dtype").get<std::string>();
      Entry e;
      e.shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<int64_t>>();
      bool known = false;
      for (const auto& [type, spelled] : dtype_names())
        if (dtype == spelled) e.dtype = type, known = true;
      if (!known) bad("gives tensor '", name, "' the unknown dtype '", dtype, "'");
      int64_t numel = 1;
      for (int64_t d : e.shape) numel *= d;
      const int64_t size = numel * int64_t(torch::elementSize(e.dtype));
      if (offsets.size() != 2 || offsets[0] < 0 || offsets[1] - offsets[0] != size || uint64_t(offsets[1]) > data_size)
        bad("gives tensor '", name, "' offsets that do not hold its ", numel, " elements of ", dtype);
      e.begin = offsets[0];
      e.end = offsets[1];
      entries_.emplace(name, std::move(e));
    }
  } catch (const json::exception& e) {
    bad("has a malformed header: ", e.what());
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::pair<int64_t, std::string>> ordered;
  for (const auto& [name, e] : entries_) ordered.emplace_back(e.begin, name);
  std::sort(ordered.begin(), ordered.end());
  std::vector<std::string> out;
  for (auto& [begin, name] : ordered) out.push_back(std::move(name));
  return out;
}

torch::Tensor SafetensorsFile::read(const std::string& name) const {
  const auto found = entries_.find(name);
  if (found == entries_.end()) fail("safetensors file '", path_, "' holds no tensor '", name, "'");
  const Entry& e = found->second;
  auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  auto* out = static_cast<char*>(tensor.data_ptr());
  for (int64_t done = 0, size = e.end - e.begin; done < size;) {
    const ssize_t got = ::pread(fd_, out + done, size_t(size - done), off_t(data_start_ + uint64_t(e.begin + done)));
    if (got <= 0)
      fail("safetensors file '", path_, "': tensor '", name, "' cannot be read: ",
           got == 0 ? "the file ends before it" : std::strerror(errno));
    done += got;
  }
  return tensor;
}

Safetensors read_safetensors(const std::string& path) {
  SafetensorsFile file(path);
  Safetensors out;
  out.metadata = file.metadata();
  for (const auto& name : file.names()) out.tensors.emplace_back(name, file.read(name));
  return out;
}

}  // namespace trident
