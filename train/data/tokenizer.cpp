#include "train/data/tokenizer.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/files.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trident {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<ByteTokenizer>(); }
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
  int64_t end_of_document() const override { return 0; }  // text files hold no NUL byte
  std::string type() const override { return "byte"; }

 protected:
  std::vector<std::string> write_files(const std::string&, Publication&) const override { return {}; }
};

std::string sidecar_path(const std::string& prefix) { return prefix + ".tokenizer.json"; }

// How many files of its own each type of tokenizer keeps beside a dataset.
const std::map<std::string, size_t> kFilesOfType = {{"byte", 0}, {"sentencepiece", 1}, {"gpt2-bpe", 2}, {"hf-bpe", 1}};

}  // namespace

std::string describe_tokenizer(const std::string& type, int64_t vocab_size) {
  const std::string name = type == "byte"            ? "byte-level"
                           : type == "sentencepiece" ? "SentencePiece BPE"
                           : type == "gpt2-bpe"      ? "GPT-2 byte-level BPE"
                           : type == "hf-bpe"        ? "Hugging Face byte-level BPE"
                                                     : type;
  return str(name, " (", vocab_size, " ids)");
}

void Tokenizer::save(const std::string& prefix, Publication& files) const {
  json sidecar = {{"type", type()},
                  {"vocab_size", vocab_size()},
                  {"end_of_document", end_of_document()},
                  {"files", json::array()}};
  for (const auto& file : write_files(prefix, files)) sidecar["files"].push_back(fs::path(file).filename().string());
  write_text_file(files.stage(sidecar_path(prefix)), sidecar.dump(2) + "\n");
}

void Tokenizer::save(const std::string& prefix) const {
  Publication files(prefix + ".publishing");
  save(prefix, files);
  files.publish();
}

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::optional<TokenizerRecord> read_tokenizer_record(const std::string& prefix) {
  const std::string path = sidecar_path(prefix);
  if (!fs::exists(path)) return std::nullopt;
  const fs::path folder = fs::path(path).parent_path();
  try {
    const json sidecar = json::parse(read_text_file(path, "tokenizer file"));
    TokenizerRecord record{sidecar.at("type").get<std::string>(), sidecar.at("vocab_size").get<int64_t>(),
                           sidecar.at("end_of_document").get<int64_t>(), {}, path};
    for (const auto& file : sidecar.at("files")) record.files.push_back((folder / file.get<std::string>()).string());
    const auto files = kFilesOfType.find(record.type);
    if (files == kFilesOfType.end() || record.files.size() != files->second)
      fail("tokenizer file '", path, "' names type '", record.type, "' with ", record.files.size(),
           " files; expected byte (no files), sentencepiece (1), gpt2-bpe (2) or hf-bpe (1)");
    if (record.vocab_size <= 0 || record.end_of_document < 0 || record.end_of_document >= record.vocab_size)
      fail("tokenizer file '", path, "' records vocab_size ", record.vocab_size, " and end_of_document ",
           record.end_of_document, "; expected 0 <= end_of_document < vocab_size");
    return record;
  } catch (const json::exception& e) {
    fail("tokenizer file '", path, "' is malformed: ", e.what());
  }
}

std::unique_ptr<Tokenizer> load_dataset_tokenizer(const std::string& prefix) {
  const auto recorded = read_tokenizer_record(prefix);
  if (!recorded)
    fail("dataset '", prefix, "' records no tokenizer (", sidecar_path(prefix),
         " is missing): make it with trident's preprocess");
  const TokenizerRecord& record = *recorded;
  std::unique_ptr<Tokenizer> tokenizer = record.type == "sentencepiece" ? load_sentencepiece(record.files[0])
                                         : record.type == "gpt2-bpe" ? load_gpt2_bpe(record.files[0], record.files[1])
                                         : record.type == "hf-bpe"   ? load_hf_tokenizer(record.files[0])
                                                                     : byte_tokenizer();
  if (tokenizer->vocab_size() != record.vocab_size || tokenizer->end_of_document() != record.end_of_document)
    fail("tokenizer file '", record.source, "' records ", record.vocab_size, " ids ending documents with ",
         record.end_of_document, ", but its files hold ", tokenizer->vocab_size(), " ids ending them with ",
         tokenizer->end_of_document());
  return tokenizer;
}

}  // namespace trident
