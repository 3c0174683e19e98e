// Byte-level BPE (byte_level_bpe.h) on PCRE2 for the pre-tokenisation patterns.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "train/data/byte_level_bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

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

// Distinct pieces of a corpus run to millions: the cache starts again when it holds this many,
// and keeps pieces shorter than the tokenizers package's limit only.
constexpr size_t kCachedPieces = size_t(1) << 18;
constexpr size_t kLongestCachedPiece = 256;

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

SplitPattern::SplitPattern(const std::string& pattern, bool literal, const std::string& source) : source_(source) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Oniguruma's Ruby syntax, which the tokenizers package's patterns are written in, makes ^ and $
  // line anchors: PCRE2's multi-line mode.
  const uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
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
  TRIDENT_CHECK(match_, "PCRE2 could not allocate match data for ", source_);
}

SplitPattern::~SplitPattern() {
  pcre2_match_data_free(match_);
  pcre2_code_free(code_);
}

void SplitPattern::split(std::string_view text, const std::function<void(std::string_view)>& piece) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0, from = 0;  // the next piece starts at `at`, the next search at `from`
  while (from <= text.size()) {
    const int found = pcre2_match(code_, subject, text.size(), from, 0, match_, nullptr);
    if (found == PCRE2_ERROR_NOMATCH) break;
    if (found < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(found, message, sizeof message);
      fail(source_, ": matching from byte ", from, " of a text of ", text.size(), " bytes failed: ",
           reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match_);
    const size_t start = span[0], end = span[1];
    if (start > at) piece(text.substr(at, start - at));
    if (end > start) piece(text.substr(start, end - start));
    at = end;
    // Past an empty match by one character, as Oniguruma's searches (the tokenizers package's) go on.
    from = end > start ? end : end + (end < text.size() ? utf8_length(static_cast<unsigned char>(text[end])) : 1);
  }
  if (at < text.size()) piece(text.substr(at));
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
    if (id < 0 || id > INT32_MAX) fail(source, " gives '", token, "' the id ", id, "; ids are integers from 0 to 2^31 - 1");
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
    // A pair listed twice takes its last rank, as in the tokenizers package.
    merges_[pair_key(left->second, right->second)] = {int64_t(rank), merged->second};
  }
}

void ByteLevelBpe::encode(std::string_view piece, std::vector<int64_t>& ids) const {
  const bool cacheable = piece.size() < kLongestCachedPiece;
  if (cacheable) {
    const auto cached = cache_.find(std::string(piece));
    if (cached != cache_.end()) {
      ids.insert(ids.end(), cached->second.begin(), cached->second.end());
      return;
    }
  }
  std::vector<int64_t> word;
  std::string symbols;
  for (unsigned char b : piece) {
    word.push_back(byte_ids_[b]);
    if (ignore_merges_) symbols += byte_symbols()[b];
  }
  const auto whole = ignore_merges_ ? ids_.find(symbols) : ids_.end();
  word = whole != ids_.end() ? std::vector<int64_t>{whole->second} : merge(std::move(word));
  ids.insert(ids.end(), word.begin(), word.end());
  if (cacheable) {
    if (cache_.size() >= kCachedPieces) cache_.clear();
    cache_.emplace(std::string(piece), std::move(word));
  }
}

// As the tokenizers package merges (word.rs, merge_all): the lowest-ranked pair first, of equal
// ranks the leftmost; a merge keeps the left symbol, drops the right one and queues the pairs
// it now makes with its neighbours; a queued pair whose symbols changed since is skipped.
//
//   merges "ab a" (rank 0), "a b" (rank 1); word a b a b
//   queue (1, @0) (1, @2) -> merge @0: [ab] a b, queue (0, @0) -> merge @0: [aba] b;
//   (1, @2) is stale (its left symbol is gone): aba b, where merging every "a b" first gives ab ab.
std::vector<int64_t> ByteLevelBpe::merge(std::vector<int64_t> word) const {
  struct Candidate {
    int64_t rank;
    size_t at;
    int64_t merged;
  };
  const auto later = [](const Candidate& x, const Candidate& y) { return x.rank != y.rank ? x.rank > y.rank : x.at > y.at; };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const size_t n = word.size();
  std::vector<size_t> next(n), previous(n);  // the neighbours of each live symbol; n for none
  std::vector<bool> live(n, true);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    previous[i] = i == 0 ? n : i - 1;
  }
  const auto queue_pair = [&](size_t left) {
    if (left >= n || next[left] >= n) return;
    const auto merge = merges_.find(pair_key(word[left], word[next[left]]));
    if (merge != merges_.end()) queue.push({merge->second.first, left, merge->second.second});
  };
  for (size_t i = 0; i + 1 < n; ++i) queue_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (!live[top.at] || next[top.at] >= n) continue;
    const size_t right = next[top.at];
    const auto merge = merges_.find(pair_key(word[top.at], word[right]));
    if (merge == merges_.end() || merge->second.second != top.merged) continue;
    word[top.at] = top.merged;
    live[right] = false;
    next[top.at] = next[right];
    if (next[right] < n) previous[next[right]] = top.at;
    queue_pair(previous[top.at]);
    queue_pair(top.at);
  }
  std::vector<int64_t> merged;
  for (size_t i = 0; i < n; i = next[i]) merged.push_back(word[i]);  // the first symbol always lives
  return merged;
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
