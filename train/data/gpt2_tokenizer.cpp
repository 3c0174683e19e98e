// GPT-2's byte-level BPE (Radford et al. 2019; Megatron's GPT2BPETokenizer files) on PCRE2 for
// the pre-tokenisation pattern and nlohmann-json for vocab.json (tokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "core/files.h"
#include "train/data/tokenizer.h"

namespace trident {
namespace {

// GPT-2 splits text into pieces before BPE: contractions, runs of letters or digits with an
// optional leading space, runs of other symbols, and whitespace.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += char(code_point);
  } else if (code_point < 0x800) {
    out += char(0xC0 | (code_point >> 6));
    out += char(0x80 | (code_point & 0x3F));
  } else {
    out += char(0xE0 | (code_point >> 12));
    out += char(0x80 | ((code_point >> 6) & 0x3F));
    out += char(0x80 | (code_point & 0x3F));
  }
  return out;
}

// GPT-2's bytes_to_unicode: every byte as a printable character (its own for printable Latin-1,
// 256 + n for the others), so that BPE works on text without whitespace or control characters.
std::vector<std::string> byte_symbols() {
  std::vector<std::string> symbols(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    symbols[b] = utf8(printable ? b : next++);
  }
  return symbols;
}

class Gpt2BpeTokenizer : public Tokenizer {
 public:
  Gpt2BpeTokenizer(const std::string& vocab_json, const std::string& merges_txt)
      : vocab_text_(read_text_file(vocab_json, "GPT-2 vocabulary")),
        merges_text_(read_text_file(merges_txt, "GPT-2 merges")),
        symbols_(byte_symbols()) {
    const auto vocabulary = nlohmann::json::parse(vocab_text_, nullptr, /*allow_exceptions=*/false);
    if (!vocabulary.is_object())
      fail("GPT-2 vocabulary '", vocab_json, "' is not a JSON object of token ids (it is ",
           vocabulary.is_discarded() ? "not JSON" : vocabulary.type_name(), ")");
    for (const auto& [token, id] : vocabulary.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        fail("GPT-2 vocabulary '", vocab_json, "' gives '", token, "' the id ", id.dump(), "; ids are integers >= 0");
      ids_[token] = id.get<int64_t>();
    }
    for (const auto& [token, id] : ids_)
      if (!tokens_.emplace(id, token).second)
        fail("GPT-2 vocabulary '", vocab_json, "' gives the id ", id, " to both '", tokens_[id], "' and '", token, "'");
    for (size_t b = 0; b < 256; ++b) {
      byte_of_[symbols_[b]] = static_cast<unsigned char>(b);
      if (!ids_.count(symbols_[b])) fail("GPT-2 vocabulary '", vocab_json, "' lacks the symbol of byte ", b);
    }
    const auto eod = ids_.find("<|endoftext|>");
    if (eod == ids_.end()) fail("GPT-2 vocabulary '", vocab_json, "' has no <|endoftext|> to end documents");
    end_of_document_ = eod->second;
    int64_t rank = 0;
    size_t at = 0;
    while (at < merges_text_.size()) {
      size_t end = merges_text_.find('\n', at);
      if (end == std::string::npos) end = merges_text_.size();
      std::string line = merges_text_.substr(at, end - at);
      at = end + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        fail("GPT-2 merges '", merges_txt, "' line ", rank + 1, " is not two symbols: '", line, "'");
      ranks_.emplace(line, rank++);
    }
    int error = 0;
    PCRE2_SIZE offset = 0;
    pattern_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    TRIDENT_CHECK(pattern_, "GPT-2's pattern does not compile (PCRE2 error ", error, " at ", offset, ")");
    match_ = pcre2_match_data_create_from_pattern(pattern_, nullptr);
  }
  ~Gpt2BpeTokenizer() override {
    pcre2_match_data_free(match_);
    pcre2_code_free(pattern_);
  }
  Gpt2BpeTokenizer(const Gpt2BpeTokenizer&) = delete;
  Gpt2BpeTokenizer& operator=(const Gpt2BpeTokenizer&) = delete;

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t at = 0;
    while (at < text.size()) {
      if (pcre2_match(pattern_, subject, text.size(), at, 0, match_, nullptr) < 0) {
        add_piece(text.substr(at), ids);  // nothing matches the rest: it is one piece
        break;
      }
      // Every alternative matches at least one character. Bytes skipped before the match
      // (invalid UTF-8, which no alternative matches) are a piece of their own.
      const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match_);
      if (span[0] > at) add_piece(text.substr(at, span[0] - at), ids);
      add_piece(text.substr(span[0], span[1] - span[0]), ids);
      at = span[1];
    }
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (int64_t id : ids) {
      const auto token = tokens_.find(id);
      if (token == tokens_.end()) fail("GPT-2 BPE: id ", id, " is not in the vocabulary");
      const std::string& symbols = token->second;
      // Each UTF-8 character is one byte's symbol; special tokens are plain ASCII.
      for (size_t i = 0; i < symbols.size();) {
        const size_t length = (symbols[i] & 0x80) == 0 ? 1 : (symbols[i] & 0xE0) == 0xC0 ? 2 : 3;
        const auto byte = byte_of_.find(symbols.substr(i, length));
        text += byte != byte_of_.end() ? char(byte->second) : symbols[i];
        i += byte != byte_of_.end() ? length : 1;
      }
    }
    return text;
  }

  int64_t vocab_size() const override {
    int64_t highest = -1;
    for (const auto& [id, token] : tokens_) highest = std::max(highest, id);
    return highest + 1;
  }
  int64_t end_of_document() const override { return end_of_document_; }
  std::string type() const override { return "gpt2-bpe"; }

 protected:
  std::vector<std::string> write_files(const std::string& prefix) const override {
    const std::vector<std::string> files = {prefix + ".vocab.json", prefix + ".merges.txt"};
    replace_file(files[0], vocab_text_);  // they may be the files they were loaded from
    replace_file(files[1], merges_text_);
    return files;
  }

 private:
  // BPE of one piece: its bytes' symbols, then the lowest-ranked adjacent pair merged, again and
  // again, until no pair of neighbours is a merge. Pieces repeat, so results are cached.
  void add_piece(const std::string& piece, std::vector<int64_t>& ids) const {
    auto cached = cache_.find(piece);
    if (cached == cache_.end()) {
      std::vector<std::string> word;
      for (unsigned char b : piece) word.push_back(symbols_[b]);
      for (;;) {
        int64_t best = INT64_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < word.size(); ++i) {
          const auto rank = ranks_.find(word[i] + " " + word[i + 1]);
          if (rank != ranks_.end() && rank->second < best) best = rank->second, at = i;
        }
        if (best == INT64_MAX) break;
        const std::string left = word[at], right = word[at + 1];
        std::vector<std::string> merged;
        for (size_t i = 0; i < word.size(); ++i) {
          if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
            merged.push_back(left + right);
            ++i;
          } else {
            merged.push_back(word[i]);
          }
        }
        word = std::move(merged);
      }
      std::vector<int64_t> piece_ids;
      for (const auto& symbol : word) {
        const auto id = ids_.find(symbol);
        if (id == ids_.end()) fail("GPT-2 BPE: merged symbol '", symbol, "' is not in the vocabulary");
        piece_ids.push_back(id->second);
      }
      cached = cache_.emplace(piece, std::move(piece_ids)).first;
    }
    ids.insert(ids.end(), cached->second.begin(), cached->second.end());
  }

  std::string vocab_text_, merges_text_;  // as read: save() copies them
  std::vector<std::string> symbols_;      // per byte
  std::unordered_map<std::string, unsigned char> byte_of_;
  std::unordered_map<std::string, int64_t> ids_;
  std::map<int64_t, std::string> tokens_;
  std::unordered_map<std::string, int64_t> ranks_;  // "left right" -> rank (lower merges first)
  int64_t end_of_document_ = 0;
  pcre2_code* pattern_ = nullptr;
  pcre2_match_data* match_ = nullptr;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_json, const std::string& merges_txt) {
  return std::make_unique<Gpt2BpeTokenizer>(vocab_json, merges_txt);
}

}  // namespace trident
