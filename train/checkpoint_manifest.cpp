#include "train/checkpoint_manifest.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trident {
namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kPartPrefix = "manifest.rank";
constexpr const char* kFormat = "trident checkpoint 1";

json files_json(const std::vector<FileRecord>& files) {
  json out = json::object();
  for (const auto& f : files)
    out[f.name] = {{"bytes", f.digest.bytes}, {"xxh3", Checksum::hex(f.digest.checksum)}};
  return out;
}

void write_json(const fs::path& path, const json& value) {
  write_text_file(path.string(), value.dump(2) + "\n");
}

json read_json(const fs::path& path) {
  const std::string text = read_text_file(path.string(), "checkpoint file");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("checkpoint file '", path.string(), "' is not valid JSON: ", e.what());
  }
}

}  // namespace

void write_manifest_part(const std::string& folder, int rank, const std::vector<FileRecord>& files) {
  write_json(fs::path(folder) / str(kPartPrefix, rank, ".json"), files_json(files));
}

void write_manifest(const std::string& folder, int64_t iteration, double loss) {
  json files = json::object();
  std::vector<fs::path> parts;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename().string().rfind(kPartPrefix, 0) == 0) parts.push_back(entry.path());
  for (const auto& part : parts) files.update(read_json(part));
  json manifest = {{"format", kFormat}, {"iteration", iteration}, {"files", files}};
  manifest["loss"] = std::isfinite(loss) ? json(loss) : json(nullptr);
  write_json(fs::path(folder) / kManifest, manifest);
  for (const auto& part : parts) fs::remove(part);
}

Manifest Manifest::read(const std::string& folder) {
  Manifest m;
  m.folder_ = folder;
  const fs::path path = fs::path(folder) / kManifest;
  if (!fs::exists(path)) return m;
  const json manifest = read_json(path);
  try {
    if (manifest.at("format") != kFormat)
      fail("checkpoint file '", path.string(), "' has format ", manifest.at("format").dump(),
           "; this trident reads \"", kFormat, "\"");
    m.present_ = true;
    m.finite_loss_ = manifest.at("loss").is_number();
    for (const auto& [name, record] : manifest.at("files").items()) {
      FileDigest digest;
      digest.bytes = record.at("bytes").get<uint64_t>();
      const std::string hex = record.at("xxh3").get<std::string>();
      auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), digest.checksum, 16);
      if (ec != std::errc() || end != hex.data() + hex.size() || hex.size() != 16)
        fail("checkpoint file '", path.string(), "' records checksum '", hex, "' for ", name,
             "; expected 16 hex digits");
      m.files_[name] = digest;
    }
  } catch (const json::exception& e) {
    fail("checkpoint file '", path.string(), "' is malformed: ", e.what());
  }
  return m;
}

void Manifest::verify(const std::string& file) const {
  if (!present_) return;
  const std::string path = (fs::path(folder_) / file).string();
  const auto listed = files_.find(file);
  if (listed == files_.end())
    fail("checkpoint file '", path, "' is not listed in its ", kManifest);
  if (!fs::exists(path)) fail("checkpoint file '", path, "' is missing");
  const FileDigest found = digest_file(path, "checkpoint file");
  const FileDigest& recorded = listed->second;
  if (found.bytes != recorded.bytes || found.checksum != recorded.checksum)
    fail("checkpoint file '", path, "' is corrupt: it holds ", found.bytes, " bytes with XXH3 ",
         Checksum::hex(found.checksum), ", but ", kManifest, " recorded ", recorded.bytes,
         " bytes with XXH3 ", Checksum::hex(recorded.checksum));
}

}  // namespace trident
