// Hugging Face's tokenizer.json for byte-level BPE (tokenizer.h), the format of GPT-2's,
// Llama 3's and Qwen's tokenizers, read with nlohmann-json; normalisation by ICU; the BPE and
// its patterns are the shared engine's (byte_level_bpe.h). A text goes the way the tokenizers
// package takes it:
//
//   text ─▶ added tokens that are not special and not normalized split out (on the raw text)
//        ─▶ normalizer (NFC, NFKC, NFD, NFKD or a sequence of them)
//        ─▶ normalized added tokens split out
//        ─▶ pre-tokenizer: each Split pattern cuts the pieces further, then ByteLevel (a space
//           before each piece with add_prefix_space, GPT-2's pattern with use_regex)
//        ─▶ BPE of each piece
//
// Special tokens are ids only: their text in a document is encoded as text (the tokenizers
// package's encode_special_tokens), so that no text makes a document's end. The post-processor
// (a beginning-of-text id, say) is not applied: encode(text, add_special_tokens=False)'s ids.
#include <nlohmann/json.hpp>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <algorithm>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "train/data/byte_level_bpe.h"
#include "train/data/tokenizer.h"

namespace trident {
namespace {

using nlohmann::json;

// Names of the token that ends documents, first found first: GPT-2's and Qwen's, Llama 3's,
// then the SentencePiece-era ones.
const std::vector<std::string> kEndOfDocumentNames = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};

struct AddedToken {
  int64_t id = 0;
  std::string content;
};

// A step of the pre-tokenizer: an optional space before each piece, then a pattern that cuts it.
struct PreTokenizerStep {
  bool prefix_space = false;             // ByteLevel's add_prefix_space
  std::unique_ptr<SplitPattern> pattern;  // null: the piece stays whole
};

class HfBpeTokenizer : public Tokenizer {
 public:
  explicit HfBpeTokenizer(const std::string& path)
      : text_(read_text_file(path, "Hugging Face tokenizer")), source_(str("Hugging Face tokenizer '", path, "'")) {
    const json file = json::parse(text_, nullptr, /*allow_exceptions=*/false);
    if (!file.is_object())
      fail(source_, " is not a JSON object (it is ", file.is_discarded() ? "not JSON" : file.type_name(), ")");
    try {
      read_model(file.at("model"));
      read_added_tokens(file.value("added_tokens", json::array()));
      read_normalizer(file.value("normalizer", json()), "normalizer");
      for (auto& token : normalized_added_) token.content = normalize(token.content);
      read_pre_tokenizer(file.value("pre_tokenizer", json()));
      const json decoder = file.value("decoder", json());
      if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel")
        unsupported("decoder", decoder, "ByteLevel");
    } catch (const json::exception& e) {
      fail(source_, " is malformed: ", e.what());
    }
    for (const auto& name : kEndOfDocumentNames) {
      const auto special = std::find_if(specials_.begin(), specials_.end(),
                                        [&](const AddedToken& token) { return token.content == name; });
      if (special != specials_.end()) {
        end_of_document_ = special->id;
        break;
      }
    }
    if (end_of_document_ < 0)
      fail(source_, " has no special token to end documents: expected one of ", join(kEndOfDocumentNames, ", "),
           " among its added_tokens with \"special\": true");
  }

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    split_added(text, raw_added_, ids, [&](std::string_view segment) {
      std::string normalized;
      if (!normalizers_.empty()) segment = normalized = normalize(segment);
      split_added(segment, normalized_added_, ids, [&](std::string_view piece) { pre_tokenize(0, piece, ids); });
    });
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (int64_t id : ids) {
      const auto added = added_text_.find(id);
      const std::string* bytes = added != added_text_.end() ? &added->second : bpe_->bytes_of(id);
      if (!bytes) fail(source_, ": id ", id, " is not in the vocabulary");
      text += *bytes;
    }
    return text;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  int64_t end_of_document() const override { return end_of_document_; }
  std::string type() const override { return "hf-bpe"; }

 protected:
  std::vector<std::string> write_files(const std::string& prefix) const override {
    const std::string file = prefix + ".hf-tokenizer.json";
    replace_file(file, text_);  // it may be the file it was loaded from
    return {file};
  }

 private:
  [[noreturn]] void unsupported(const std::string& key, const json& value, const std::string& expected) const {
    fail(source_, ": ", key, " is ", value.dump(), "; trident reads ", expected);
  }

  void read_model(const json& model) {
    if (model.value("type", "BPE") != "BPE") unsupported("model.type", model["type"], "BPE");
    const json dropout = model.value("dropout", json());
    if (!dropout.is_null() && dropout.get<double>() != 0) unsupported("model.dropout", dropout, "null (no dropout)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json affix = model.value(key, json());
      if (!affix.is_null() && !affix.get<std::string>().empty())
        unsupported(str("model.", key), affix, "null (byte-level BPE has none)");
    }
    if (model.value("byte_fallback", false)) unsupported("model.byte_fallback", true, "false (byte-level BPE)");
    std::unordered_map<std::string, int64_t> vocabulary;
    for (const auto& [token, id] : model.at("vocab").items()) vocabulary[token] = id.get<int64_t>();
    // Merges are "left right" strings (tokenizers before 0.20) or [left, right] pairs.
    std::vector<BpeMerge> merges;
    for (const json& merge : model.at("merges")) {
      if (merge.is_array() && merge.size() == 2) {
        merges.push_back({merge[0].get<std::string>(), merge[1].get<std::string>()});
        continue;
      }
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        unsupported(str("model.merges[", merges.size(), "]"), merge, "two symbols");
      merges.push_back({line.substr(0, space), line.substr(space + 1)});
    }
    bpe_ = std::make_unique<ByteLevelBpe>(vocabulary, merges, model.value("ignore_merges", false), source_);
    vocab_size_ = bpe_->vocab_size();
  }

  void read_added_tokens(const json& tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const json& token = tokens[i];
      AddedToken added{token.at("id").get<int64_t>(), token.at("content").get<std::string>()};
      const std::string key = str("added_tokens[", i, "] (", added.content, ")");
      if (added.id < 0 || added.content.empty()) unsupported(key, token, "an id >= 0 and some content");
      vocab_size_ = std::max(vocab_size_, added.id + 1);
      added_text_[added.id] = added.content;
      const bool special = token.value("special", false);
      if (special) {
        specials_.push_back(added);
        continue;
      }
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        if (token.value(flag, false)) unsupported(str(key, ".", flag), true, "false for a token that is not special");
      (token.value("normalized", true) ? normalized_added_ : raw_added_).push_back(added);
    }
  }

  void read_normalizer(const json& normalizer, const std::string& key) {
    if (normalizer.is_null()) return;
    const std::string type = normalizer.at("type").get<std::string>();
    if (type == "Sequence") {
      const json& steps = normalizer.at("normalizers");
      for (size_t i = 0; i < steps.size(); ++i) read_normalizer(steps[i], str(key, ".normalizers[", i, "]"));
      return;
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* form = type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                   : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                   : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                   : type == "NFKD" ? icu::Normalizer2::getNFKDInstance(status)
                                                    : nullptr;
    if (!form) unsupported(key + ".type", type, "null, NFC, NFKC, NFD, NFKD or a Sequence of them");
    TRIDENT_CHECK(U_SUCCESS(status), "ICU has no ", type, " normaliser: ", u_errorName(status));
    normalizers_.push_back(form);
  }

  void read_pre_tokenizer(const json& pre_tokenizer) {
    const char* expected = "ByteLevel, or a Sequence of Split patterns (behavior Isolated) ending in ByteLevel";
    if (!pre_tokenizer.is_object()) unsupported("pre_tokenizer", pre_tokenizer, expected);
    const bool sequence = pre_tokenizer.at("type") == "Sequence";
    const json steps = sequence ? pre_tokenizer.at("pretokenizers") : json::array({pre_tokenizer});
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& step = steps[i];
      const std::string key = sequence ? str("pre_tokenizer.pretokenizers[", i, "]") : "pre_tokenizer";
      const std::string type = step.at("type").get<std::string>();
      const bool last = i + 1 == steps.size();
      if (type == "ByteLevel" && last) {
        steps_.push_back({step.value("add_prefix_space", true),
                          step.value("use_regex", true)
                              ? std::make_unique<SplitPattern>(kGpt2Pattern, false, "GPT-2's pattern")
                              : nullptr});
      } else if (type == "Split" && !last) {
        if (step.value("behavior", "") != "Isolated") unsupported(key + ".behavior", step.value("behavior", json()), "Isolated");
        if (step.value("invert", false)) unsupported(key + ".invert", true, "false");
        const json& pattern = step.at("pattern");
        const bool literal = pattern.contains("String");
        steps_.push_back({false, std::make_unique<SplitPattern>(pattern.at(literal ? "String" : "Regex").get<std::string>(), literal,
                                                                str(source_, " ", key, ".pattern"))});
      } else {
        unsupported(key + ".type", type, expected);
      }
    }
  }

  std::string normalize(std::string_view text) const {
    std::string in(text), out;
    for (const icu::Normalizer2* form : normalizers_) {
      out.clear();
      icu::StringByteSink<std::string> sink(&out);
      UErrorCode status = U_ZERO_ERROR;
      form->normalizeUTF8(0, icu::StringPiece(in.data(), int32_t(in.size())), sink, nullptr, status);
      TRIDENT_CHECK(U_SUCCESS(status), "ICU could not normalise ", in.size(), " bytes: ", u_errorName(status));
      in.swap(out);
    }
    return in;
  }

  // Splits the added tokens out of `text` as the tokenizers package matches them (leftmost, then
  // longest), appending their ids and handing the text between them to `between`.
  void split_added(std::string_view text, const std::vector<AddedToken>& tokens, std::vector<int64_t>& ids,
                   const std::function<void(std::string_view)>& between) const {
    size_t at = 0;
    for (;;) {
      const AddedToken* found = nullptr;
      size_t start = std::string_view::npos;
      for (const AddedToken& token : tokens) {
        const size_t where = text.find(token.content, at);
        if (where == std::string_view::npos) continue;
        if (!found || where < start || (where == start && token.content.size() > found->content.size())) {
          found = &token;
          start = where;
        }
      }
      if (!found) break;
      if (start > at) between(text.substr(at, start - at));
      ids.push_back(found->id);
      at = start + found->content.size();
    }
    if (at < text.size()) between(text.substr(at));
  }

  void pre_tokenize(size_t step, std::string_view piece, std::vector<int64_t>& ids) const {
    if (step == steps_.size()) return bpe_->encode(piece, ids);
    const PreTokenizerStep& pre = steps_[step];
    std::string prefixed;
    if (pre.prefix_space && piece.front() != ' ') piece = prefixed = " " + std::string(piece);
    if (!pre.pattern) return pre_tokenize(step + 1, piece, ids);
    pre.pattern->split(piece, [&](std::string_view part) { pre_tokenize(step + 1, part, ids); });
  }

  std::string text_;  // the file as read: save() copies it
  std::string source_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::vector<AddedToken> raw_added_, normalized_added_, specials_;
  std::unordered_map<int64_t, std::string> added_text_;
  std::vector<const icu::Normalizer2*> normalizers_;
  std::vector<PreTokenizerStep> steps_;
  int64_t vocab_size_ = 0, end_of_document_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json) {
  return std::make_unique<HfBpeTokenizer>(tokenizer_json);
}

}  // namespace trident
