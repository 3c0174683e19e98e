// GPT-2's byte-level BPE (Radford et al. 2019; Megatron's GPT2BPETokenizer files): vocab.json
// (nlohmann-json) and merges.txt on the shared engine (byte_level_bpe.h) with GPT-2's pattern.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "train/data/byte_level_bpe.h"
#include "train/data/tokenizer.h"

namespace trident {
namespace {

std::unordered_map<std::string, int64_t> read_vocabulary(const std::string& text, const std::string& path) {
  const auto vocabulary = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!vocabulary.is_object())
    fail("GPT-2 vocabulary '", path, "' is not a JSON object of token ids (it is ",
         vocabulary.is_discarded() ? "not JSON" : vocabulary.type_name(), ")");
  std::unordered_map<std::string, int64_t> ids;
  for (const auto& [token, id] : vocabulary.items()) {
    if (!id.is_number_integer())
      fail("GPT-2 vocabulary '", path, "' gives '", token, "' the id ", id.dump(), "; ids are integers from 0 to 2^31 - 1");
    ids[token] = id.get<int64_t>();
  }
  return ids;
}

// One merge per line, "left right"; a first line "#version..." is a comment.
std::vector<BpeMerge> read_merges(const std::string& text, const std::string& path) {
  std::vector<BpeMerge> merges;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      fail("GPT-2 merges '", path, "' line ", merges.size() + 1, " is not two symbols: '", line, "'");
    merges.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  return merges;
}

class Gpt2BpeTokenizer : public Tokenizer {
 public:
  // The files' contents, and their paths for errors.
  Gpt2BpeTokenizer(std::string vocab_text, std::string merges_text, const std::string& vocab_json,
                   const std::string& merges_txt)
      : vocab_text_(std::move(vocab_text)),
        merges_text_(std::move(merges_text)),
        vocab_json_(vocab_json),
        merges_txt_(merges_txt),
        bpe_(read_vocabulary(vocab_text_, vocab_json), read_merges(merges_text_, merges_txt), false,
             str("GPT-2 vocabulary '", vocab_json, "' with merges '", merges_txt, "'")),
        pattern_(kGpt2Pattern, false, "GPT-2's pattern") {
    end_of_document_ = bpe_.id_of("<|endoftext|>");
    if (end_of_document_ < 0) fail("GPT-2 vocabulary '", vocab_json, "' has no <|endoftext|> to end documents");
  }

  std::unique_ptr<Tokenizer> clone() const override {
    return std::make_unique<Gpt2BpeTokenizer>(vocab_text_, merges_text_, vocab_json_, merges_txt_);
  }

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    pattern_.split(text, [&](std::string_view piece) { bpe_.encode(piece, ids); });
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (int64_t id : ids) {
      const std::string* bytes = bpe_.bytes_of(id);
      if (!bytes) fail("GPT-2 BPE: id ", id, " is not in the vocabulary");
      text += *bytes;
    }
    return text;
  }

  int64_t vocab_size() const override { return bpe_.vocab_size(); }
  int64_t end_of_document() const override { return end_of_document_; }
  std::string type() const override { return "gpt2-bpe"; }

 protected:
  std::vector<std::string> write_files(const std::string& prefix, Publication& staged) const override {
    const std::vector<std::string> files = {prefix + ".vocab.json", prefix + ".merges.txt"};
    write_text_file(staged.stage(files[0]), vocab_text_);  // they may replace the files they were loaded from
    write_text_file(staged.stage(files[1]), merges_text_);
    return files;
  }

 private:
  std::string vocab_text_, merges_text_;  // as read: save() copies them
  std::string vocab_json_, merges_txt_;
  ByteLevelBpe bpe_;
  SplitPattern pattern_;
  int64_t end_of_document_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_json, const std::string& merges_txt) {
  return std::make_unique<Gpt2BpeTokenizer>(read_text_file(vocab_json, "GPT-2 vocabulary"),
                                            read_text_file(merges_txt, "GPT-2 merges"), vocab_json, merges_txt);
}

}  // namespace trident
