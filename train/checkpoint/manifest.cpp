#include "train/checkpoint/manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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
constexpr const char* kFormat = "trident checkpoint 2";  // 1: one LibTorch archive per rank and chunk

constexpr StateKind kKinds[] = {StateKind::weight, StateKind::main, StateKind::exp_avg, StateKind::exp_avg_sq};

json files_json(const std::vector<FileRecord>& files) {
  json out = json::object();
  for (const auto& f : files)
    out[f.name] = {{"bytes", f.digest.bytes}, {"xxh3", Checksum::hex(f.digest.checksum)}};
  return out;
}

json piece_json(const TensorPiece& p) {
  return {{"name", p.name}, {"kind", name(p.kind)}, {"dim", p.dim},   {"part", p.part}, {"parts", p.parts},
          {"part_shape", p.part_shape}, {"offset", p.offset}, {"numel", p.numel}, {"file", p.file}, {"key", p.key}};
}

TensorPiece piece_from(const json& j) {
  TensorPiece p;
  const std::string kind = j.at("kind").get<std::string>();
  bool known = false;
  for (StateKind k : kKinds)
    if (kind == name(k)) p.kind = k, known = true;
  if (!known) throw json::other_error::create(501, "unknown tensor kind '" + kind + "'", nullptr);
  p.name = j.at("name").get<std::string>();
  p.dim = j.at("dim").get<int64_t>();
  p.part = j.at("part").get<int64_t>();
  p.parts = j.at("parts").get<int64_t>();
  p.part_shape = j.at("part_shape").get<std::vector<int64_t>>();
  p.offset = j.at("offset").get<int64_t>();
  p.numel = j.at("numel").get<int64_t>();
  p.file = j.at("file").get<std::string>();
  p.key = j.at("key").get<std::string>();
  return p;
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

const char* name(StateKind kind) {
  switch (kind) {
    case StateKind::weight: return "weight";
    case StateKind::main: return "main";
    case StateKind::exp_avg: return "exp_avg";
    case StateKind::exp_avg_sq: return "exp_avg_sq";
  }
  return "?";
}

void write_manifest_part(const std::string& folder, int rank, const std::vector<FileRecord>& files,
                         const std::vector<TensorPiece>& pieces) {
  json tensors = json::array();
  for (const auto& p : pieces) tensors.push_back(piece_json(p));
  write_json(fs::path(folder) / str(kPartPrefix, rank, ".json"), {{"files", files_json(files)}, {"tensors", tensors}});
}

void write_manifest(const std::string& folder, int64_t iteration, double loss) {
  json files = json::object(), tensors = json::array();
  std::vector<fs::path> parts;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename().string().rfind(kPartPrefix, 0) == 0) parts.push_back(entry.path());
  std::sort(parts.begin(), parts.end());  // the same manifest from the same parts
  for (const auto& part : parts) {
    const json written = read_json(part);
    files.update(written.at("files"));
    for (const auto& piece : written.at("tensors")) tensors.push_back(piece);
  }
  json manifest = {{"format", kFormat}, {"iteration", iteration}, {"files", files}, {"tensors", tensors}};
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
    for (const auto& piece : manifest.at("tensors")) m.pieces_.push_back(piece_from(piece));
  } catch (const json::exception& e) {
    fail("checkpoint file '", path.string(), "' is malformed: ", e.what());
  }
  return m;
}

void Manifest::verify(const std::string& file) const {
  const std::string path = (fs::path(folder_) / file).string();
  if (!present_) fail("checkpoint '", folder_, "' has no ", kManifest, "; cannot check or load '", path, "'");
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
