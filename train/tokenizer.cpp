#include "train/tokenizer.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/error.h"
#include "core/files.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trident {
namespace {

constexpr int64_t kByteEndOfDocument = 0;

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (int64_t id : ids) text += char(static_cast<unsigned char>(id));
    return text;
  }
  int64_t vocab_size() const override { return 256; }
  int64_t end_of_document() const override { return kByteEndOfDocument; }
  std::string describe() const override { return "byte-level (256 ids)"; }
  void save(const std::string& prefix) const override { write_tokenizer_sidecar(prefix, "byte", *this, {}); }
};

std::string sidecar_path(const std::string& prefix) { return prefix + ".tokenizer.json"; }

}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

void write_tokenizer_sidecar(const std::string& prefix, const std::string& type, const Tokenizer& tokenizer,
                             const std::vector<std::string>& files) {
  json sidecar = {{"type", type},
                  {"vocab_size", tokenizer.vocab_size()},
                  {"end_of_document", tokenizer.end_of_document()},
                  {"files", json::array()}};
  for (const auto& file : files) sidecar["files"].push_back(fs::path(file).filename().string());
  const std::string text = sidecar.dump(2) + "\n";
  FileWriter writer(sidecar_path(prefix));
  writer.write(text.data(), text.size());
  writer.finish();
}

std::unique_ptr<Tokenizer> load_dataset_tokenizer(const std::string& prefix) {
  const std::string path = sidecar_path(prefix);
  if (!fs::exists(path)) return byte_tokenizer();
  const fs::path folder = fs::path(path).parent_path();
  try {
    const json sidecar = json::parse(read_text_file(path, "tokenizer file"));
    const std::string type = sidecar.at("type").get<std::string>();
    std::vector<std::string> files;
    for (const auto& f : sidecar.at("files")) files.push_back((folder / f.get<std::string>()).string());
    std::unique_ptr<Tokenizer> tokenizer;
    if (type == "byte") tokenizer = byte_tokenizer();
    else if (type == "sentencepiece" && files.size() == 1) tokenizer = load_sentencepiece(files[0]);
    else if (type == "gpt2-bpe" && files.size() == 2) tokenizer = load_gpt2_bpe(files[0], files[1]);
    else fail("tokenizer file '", path, "' names type '", type, "' with ", files.size(), " files");
    if (tokenizer->vocab_size() != sidecar.at("vocab_size").get<int64_t>())
      fail("tokenizer file '", path, "' records ", sidecar.at("vocab_size").get<int64_t>(), " ids, but its ",
           type, " files hold ", tokenizer->vocab_size());
    return tokenizer;
  } catch (const json::exception& e) {
    fail("tokenizer file '", path, "' is malformed: ", e.what());
  }
}

}  // namespace trident
