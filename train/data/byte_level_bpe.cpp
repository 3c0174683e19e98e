// Byte-level BPE (byte_level_bpe.h) on PCRE2 for the pre-tokenisation patterns.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "train/data/byte_level_bpe.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace trident {
namespace {

std::string utf8(uint32_t code_point) {
  TRIDENT_CHECK(code_point < 0x800, "byte symbols are below U+0800, not U+", code_point);
  std::string out;
  if (code_point < 0x80) {
    out += char(code_point);
  } else {
    out += char(0xC0 | (code_point >> 6));
    out += char(0x80 | (code_point & 0x3F));
  }
  return out;
}

// The length of the UTF-8 character that starts with `lead` (1 for a byte that starts none).
size_t utf8_length(unsigned char lead) {
  return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

uint64_t pair_key(int64_t left, int64_t right) { return uint64_t(left) << 32 | uint64_t(right); }

// Distinct pieces of a corpus run to millions: the cache starts again when it holds this many.
constexpr size_t kCachedPieces = size_t(1) << 18;

}  // namespace

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> symbols = [] {
    std::array<std::string, 256> out;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      out[b] = utf8(printable ? b : next++);
    }
    return out;
  }();
  return symbols;
}

SplitPattern::SplitPattern(const std::string& pattern, bool literal, const std::string& source) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = literal ? PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                        nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    fail(source, ": the pattern ", pattern, " does not compile: ", reinterpret_cast<const char*>(message),
         " at offset ", offset);
  }
  // Compiled to machine code where PCRE2 can (several times faster); pcre2_match uses it.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  match_ = pcre2_match_data_create_from_pattern(code_, nullptr);
}

SplitPattern::~SplitPattern() {
  pcre2_match_data_free(match_);
  pcre2_code_free(code_);
}

void SplitPattern::split(std::string_view text, const std::function<void(std::string_view)>& piece) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at < text.size()) {
    // An empty match at `at` would repeat forever: ask for a non-empty one there.
    if (pcre2_match(code_, subject, text.size(), at, PCRE2_NOTEMPTY_ATSTART, match_, nullptr) < 0) {
      piece(text.substr(at));
      return;
    }
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match_);
    const size_t start = span[0], end = span[1];
    if (start > at) piece(text.substr(at, start - at));
    if (end > start) piece(text.substr(start, end - start));
    at = end;  // past `at`: a match there is not empty
  }
}

ByteLevelBpe::ByteLevelBpe(const std::unordered_map<std::string, int64_t>& vocabulary,
                           const std::vector<BpeMerge>& merges, bool ignore_merges, const std::string& source)
    : ids_(vocabulary), ignore_merges_(ignore_merges) {
  std::unordered_map<std::string, unsigned char> byte_of;
  for (size_t b = 0; b < 256; ++b) {
    byte_of[byte_symbols()[b]] = static_cast<unsigned char>(b);
    const auto id = ids_.find(byte_symbols()[b]);
    if (id == ids_.end())
      fail(source, " lacks the symbol of byte ", b, " (", byte_symbols()[b],
           "): a byte-level BPE has all 256 (tokenizers: train with initial_alphabet=ByteLevel.alphabet())");
    byte_ids_[b] = id->second;
  }
  for (const auto& [token, id] : ids_) {
    if (id < 0) fail(source, " gives '", token, "' the id ", id, "; ids are integers >= 0");
    // A token's bytes: each character's byte, or the token's own text if one is not a byte symbol.
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const size_t length = utf8_length(static_cast<unsigned char>(token[i]));
      const auto byte = byte_of.find(token.substr(i, length));
      if (byte == byte_of.end()) {
        bytes = token;
        break;
      }
      bytes += char(byte->second);
      i += length;
    }
    const auto [placed, fresh] = bytes_.emplace(id, std::move(bytes));
    if (!fresh) fail(source, " gives the id ", id, " to two tokens, '", token, "' and another");
    vocab_size_ = std::max(vocab_size_, id + 1);
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const BpeMerge& merge = merges[rank];
    const auto left = ids_.find(merge.left), right = ids_.find(merge.right),
               merged = ids_.find(merge.left + merge.right);
    if (left == ids_.end() || right == ids_.end() || merged == ids_.end())
      fail(source, " merge ", rank + 1, " ('", merge.left, " ", merge.right, "') ",
           merged == ids_.end() ? "makes a token that is not" : "has a symbol that is not", " in the vocabulary");
    merges_.emplace(pair_key(left->second, right->second), std::make_pair(int64_t(rank), merged->second));
  }
}

void ByteLevelBpe::encode(std::string_view piece, std::vector<int64_t>& ids) const {
  const std::string key(piece);
  auto cached = cache_.find(key);
  if (cached == cache_.end()) {
    if (cache_.size() >= kCachedPieces) cache_.clear();
    std::vector<int64_t> word;
    std::string symbols;
    for (unsigned char b : piece) {
      word.push_back(byte_ids_[b]);
      if (ignore_merges_) symbols += byte_symbols()[b];
    }
    const auto whole = ignore_merges_ ? ids_.find(symbols) : ids_.end();
    if (whole != ids_.end()) {
      word = {whole->second};
    } else {
      for (;;) {  // merge every occurrence of the lowest-ranked pair, left to right
        int64_t best = INT64_MAX, merged = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < word.size(); ++i) {
          const auto merge = merges_.find(pair_key(word[i], word[i + 1]));
          if (merge != merges_.end() && merge->second.first < best) {
            best = merge->second.first;
            merged = merge->second.second;
            at = i;
          }
        }
        if (merged < 0) break;
        const int64_t left = word[at], right = word[at + 1];
        size_t out = 0;
        for (size_t i = 0; i < word.size(); ++out) {
          const bool pair = i + 1 < word.size() && word[i] == left && word[i + 1] == right;
          word[out] = pair ? merged : word[i];
          i += pair ? 2 : 1;
        }
        word.resize(out);
      }
    }
    cached = cache_.emplace(key, std::move(word)).first;
  }
  ids.insert(ids.end(), cached->second.begin(), cached->second.end());
}

const std::string* ByteLevelBpe::bytes_of(int64_t id) const {
  const auto bytes = bytes_.find(id);
  return bytes == bytes_.end() ? nullptr : &bytes->second;
}

int64_t ByteLevelBpe::id_of(const std::string& token) const {
  const auto id = ids_.find(token);
  return id == ids_.end() ? -1 : id->second;
}

}  // namespace trident
