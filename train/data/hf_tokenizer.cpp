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
#include <array>

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
  bool special = false;
};

// Finds added tokens in text as the tokenizers package's matcher does: the leftmost, and of
// those starting there the longest. Tokens are looked up by their first byte.
class AddedTokenMatcher {
 public:
  void add(AddedToken token) { tokens_.push_back(std::move(token)); }
  std::vector<AddedToken>& tokens() { return tokens_; }
  // After the last add and any change to the tokens' content.
  void index() {
    for (auto& candidates : by_first_byte_) candidates.clear();
    for (const AddedToken& token : tokens_)
      by_first_byte_[static_cast<unsigned char>(token.content[0])].push_back(&token);
    for (auto& candidates : by_first_byte_)
      std::stable_sort(candidates.begin(), candidates.end(), [](const AddedToken* x, const AddedToken* y) {
        return x->content.size() > y->content.size();
      });
  }
  // The first token at or after byte `from`, and where it starts; nullptr if there is none.
  std::pair<size_t, const AddedToken*> find(std::string_view text, size_t from) const {
    if (tokens_.empty()) return {text.size(), nullptr};
    for (size_t at = from; at < text.size(); ++at)
      for (const AddedToken* token : by_first_byte_[static_cast<unsigned char>(text[at])])
        if (text.compare(at, token->content.size(), token->content) == 0) return {at, token};
    return {text.size(), nullptr};
  }

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<const AddedToken*>, 256> by_first_byte_;
};

// A step of the pre-tokenizer: an optional space before each piece, then a pattern that cuts it.
struct PreTokenizerStep {
  bool prefix_space = false;             // ByteLevel's add_prefix_space
  std::unique_ptr<SplitPattern> pattern;  // null: the piece stays whole
};

class HfBpeTokenizer : public Tokenizer {
 public:
  // The file's content; `source` names it in errors.
  HfBpeTokenizer(std::string text, std::string source) : text_(std::move(text)), source_(std::move(source)) {
    const json file = json::parse(text_, nullptr, /*allow_exceptions=*/false);
    if (!file.is_object())
      fail(source_, " is not a JSON object (it is ", file.is_discarded() ? "not JSON" : file.type_name(), ")");
    try {
      read_model(object_member(file, "", "model"));
      const json added_tokens = file.value("added_tokens", json::array());
      if (!added_tokens.is_array()) unsupported("added_tokens", added_tokens, "a list of tokens");
      read_added_tokens(added_tokens);
      check_ids_are_dense();
      read_normalizer(file.value("normalizer", json()), "normalizer");
      for (auto& token : normalized_added_.tokens()) token.content = normalize(token.content);
      raw_added_.index();
      normalized_added_.index();
      read_pre_tokenizer(file.value("pre_tokenizer", json()));
      for (const char* key : {"truncation", "padding"})
        if (!file.value(key, json()).is_null()) unsupported(key, file[key], "null (trident keeps documents whole)");
      const json decoder = file.value("decoder", json());
      if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel")
        unsupported("decoder", decoder, "ByteLevel");
    } catch (const json::exception& e) {  // a value of another type where the reads above did not look
      const std::string what = e.what();
      fail(source_, " is malformed: ", what.substr(what.find(']') + 1 + (what.find(']') + 1 < what.size())));
    }
    for (const auto& name : kEndOfDocumentNames) {
      for (AddedTokenMatcher* tokens : {&raw_added_, &normalized_added_})
        for (const AddedToken& token : tokens->tokens())
          if (token.special && token.content == name) end_of_document_ = token.id;
      if (end_of_document_ >= 0) break;
    }
    if (end_of_document_ < 0)
      fail(source_, " has no special token to end documents: expected one of ", join(kEndOfDocumentNames, ", "),
           " among its added_tokens with \"special\": true");
  }

  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<HfBpeTokenizer>(text_, source_); }

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
  std::vector<std::string> write_files(const std::string& prefix, Publication& files) const override {
    const std::string file = prefix + ".hf-tokenizer.json";
    write_text_file(files.stage(file), text_);  // it may replace the file it was loaded from
    return {file};
  }

 private:
  [[noreturn]] void unsupported(const std::string& key, const json& value, const std::string& expected) const {
    std::string shown = value.dump();
    if (shown.size() > 80) shown = shown.substr(0, 80) + "...";
    fail(source_, ": ", key, " is ", shown, "; trident reads ", expected);
  }

  // The member `key` of `object`, found at `path` in the file: a missing member, or one of
  // another type, is an error naming it in words.
  const json& member(const json& object, const std::string& path, const std::string& key,
                     bool (json::*is_type)() const noexcept, const char* expected) const {
    const std::string where = path.empty() ? key : path + "." + key;
    if (!object.is_object()) unsupported(path, object, "an object");
    const auto found = object.find(key);
    if (found == object.end()) fail(source_, " has no ", where, " (", expected, ")");
    if (!((*found).*is_type)()) unsupported(where, *found, expected);
    return *found;
  }
  const json& object_member(const json& object, const std::string& path, const std::string& key) const {
    return member(object, path, key, &json::is_object, "an object");
  }
  const json& list_member(const json& object, const std::string& path, const std::string& key) const {
    return member(object, path, key, &json::is_array, "a list");
  }
  std::string text_member(const json& object, const std::string& path, const std::string& key) const {
    return member(object, path, key, &json::is_string, "a string").get<std::string>();
  }
  int64_t id_member(const json& object, const std::string& path, const std::string& key) const {
    return member(object, path, key, &json::is_number_integer, "an integer id").get<int64_t>();
  }

  static std::string quoted(const std::string& text) { return json(text).dump(); }

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
    for (const auto& [token, id] : object_member(model, "model", "vocab").items()) {
      if (!id.is_number_integer()) unsupported(str("model.vocab[", quoted(token), "]"), id, "an integer id");
      vocabulary[token] = id.get<int64_t>();
    }
    // Merges are "left right" strings (tokenizers before 0.20) or [left, right] pairs.
    std::vector<BpeMerge> merges;
    for (const json& merge : list_member(model, "model", "merges")) {
      const std::string key = str("model.merges[", merges.size(), "]");
      if (merge.is_array()) {
        if (merge.size() != 2 || !merge[0].is_string() || !merge[1].is_string())
          unsupported(key, merge, "two symbols");
        merges.push_back({merge[0].get<std::string>(), merge[1].get<std::string>()});
        continue;
      }
      const std::string line = merge.is_string() ? merge.get<std::string>() : "";
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        unsupported(key, merge, "two symbols");
      merges.push_back({line.substr(0, space), line.substr(space + 1)});
    }
    bpe_ = std::make_unique<ByteLevelBpe>(vocabulary, merges, model.value("ignore_merges", false), source_);
    model_tokens_ = int64_t(vocabulary.size());
    vocab_size_ = bpe_->vocab_size();
  }

  // The tokenizers package gives each added token its id again as it loads the file: the id
  // its text already has (an earlier added token's or the model's), else the next past both
  // the model's tokens and the added ones. A file whose ids differ would encode otherwise there.
  void read_added_tokens(const json& tokens) {
    std::unordered_map<std::string, int64_t> added_ids;
    int64_t highest = -1;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const json& token = tokens[i];
      const std::string at = str("added_tokens[", i, "]");
      AddedToken added{id_member(token, at, "id"), text_member(token, at, "content"), token.value("special", false)};
      const std::string key = str("added_tokens[", i, "] (", added.content, ")");
      if (added.content.empty()) unsupported(key + ".content", "", "some text");
      const auto earlier = added_ids.find(added.content);
      const int64_t model_id = bpe_->id_of(added.content);
      const int64_t expected = earlier != added_ids.end() ? earlier->second
                               : model_id >= 0            ? model_id
                               : highest >= model_tokens_ ? highest + 1
                                                          : model_tokens_;
      if (added.id != expected)
        unsupported(key + ".id", added.id, str(expected, ", the id the tokenizers package gives it"));
      added_ids[added.content] = added.id;
      highest = std::max(highest, added.id);
      vocab_size_ = std::max(vocab_size_, added.id + 1);
      added_text_[added.id] = added.content;
      if (!added.special)
        for (const char* flag : {"single_word", "lstrip", "rstrip"})
          if (token.value(flag, false)) unsupported(str(key, ".", flag), true, "false for a token that is not special");
      (token.value("normalized", !added.special) ? normalized_added_ : raw_added_).add(added);
    }
  }

  // Every table sized by the vocabulary (a dataset's counts, a model's embedding) takes the
  // highest id + 1 rows: ids must number the tokens from 0, as tokenizers' files do.
  void check_ids_are_dense() const {
    int64_t tokens = model_tokens_;
    for (const auto& [id, content] : added_text_)
      if (!bpe_->bytes_of(id)) ++tokens;
    if (vocab_size_ > tokens)
      fail(source_, " has ", tokens, " tokens but gives one the id ", vocab_size_ - 1, ": trident reads ids that "
           "number the tokens from 0 to ", tokens - 1);
  }

  void read_normalizer(const json& normalizer, const std::string& key) {
    if (normalizer.is_null()) return;
    const std::string type = text_member(normalizer, key, "type");
    if (type == "Sequence") {
      const json& steps = list_member(normalizer, key, "normalizers");
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
    const bool sequence = text_member(pre_tokenizer, "pre_tokenizer", "type") == "Sequence";
    const json steps = sequence ? list_member(pre_tokenizer, "pre_tokenizer", "pretokenizers") : json::array({pre_tokenizer});
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& step = steps[i];
      const std::string key = sequence ? str("pre_tokenizer.pretokenizers[", i, "]") : "pre_tokenizer";
      const std::string type = text_member(step, key, "type");
      const bool last = i + 1 == steps.size();
      if (type == "ByteLevel" && last) {
        steps_.push_back({step.value("add_prefix_space", true),
                          step.value("use_regex", true)
                              ? std::make_unique<SplitPattern>(kGpt2Pattern, false, "GPT-2's pattern")
                              : nullptr});
      } else if (type == "Split" && !last) {
        if (step.value("behavior", "") != "Isolated") unsupported(key + ".behavior", step.value("behavior", json()), "Isolated");
        if (step.value("invert", false)) unsupported(key + ".invert", true, "false");
        const json& pattern = object_member(step, key, "pattern");
        const bool literal = pattern.contains("String");
        steps_.push_back({false, std::make_unique<SplitPattern>(text_member(pattern, key + ".pattern", literal ? "String" : "Regex"), literal,
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

  // Splits the added tokens out of `text` as the tokenizers package does with
  // encode_special_tokens: each match appends its id and hands the text before it to `between`,
  // except that a special token's match stays text (it still takes its text from the others).
  void split_added(std::string_view text, const AddedTokenMatcher& matcher, std::vector<int64_t>& ids,
                   const std::function<void(std::string_view)>& between) const {
    size_t at = 0, from = 0;  // the text under way starts at `at`, the next search at `from`
    for (;;) {
      const auto [start, token] = matcher.find(text, from);
      if (!token) break;
      from = start + token->content.size();
      if (token->special) continue;
      if (start > at) between(text.substr(at, start - at));
      ids.push_back(token->id);
      at = from;
    }
    if (at < text.size()) between(text.substr(at));
  }

  void pre_tokenize(size_t step, std::string_view piece, std::vector<int64_t>& ids) const {
    if (step == steps_.size()) return bpe_->encode(piece, ids);
    const PreTokenizerStep& pre = steps_[step];
    std::string prefixed;
    if (pre.prefix_space && piece.front() != ' ') {
      prefixed.append(1, ' ').append(piece);
      piece = prefixed;
    }
    if (!pre.pattern) return pre_tokenize(step + 1, piece, ids);
    pre.pattern->split(piece, [&](std::string_view part) { pre_tokenize(step + 1, part, ids); });
  }

  std::string text_;  // the file as read: save() copies it
  std::string source_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  AddedTokenMatcher raw_added_, normalized_added_;  // "normalized": false, and true
  std::unordered_map<int64_t, std::string> added_text_;
  std::vector<const icu::Normalizer2*> normalizers_;
  std::vector<PreTokenizerStep> steps_;
  int64_t model_tokens_ = 0, vocab_size_ = 0, end_of_document_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json) {
  return std::make_unique<HfBpeTokenizer>(read_text_file(tokenizer_json, "Hugging Face tokenizer"),
                                          str("Hugging Face tokenizer '", tokenizer_json, "'"));
}

}  // namespace trident
