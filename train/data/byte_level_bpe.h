// The byte-level BPE that GPT-2's vocab.json + merges.txt and Hugging Face's tokenizer.json
// share (tokenizer.h): text is cut into pieces by patterns (SplitPattern), each piece's bytes
// become printable symbols (byte_symbols), and the lowest-ranked adjacent pair of symbols is
// merged again and again until no neighbours are a merge (ByteLevelBpe).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

// PCRE2's types, declared here so that only byte_level_bpe.cpp includes pcre2.h.
struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace trident {

// GPT-2's pre-tokenisation: contractions, runs of letters or digits with an optional leading
// space, runs of other symbols, and whitespace (also Hugging Face's ByteLevel pre-tokenizer's).
extern const char* const kGpt2Pattern;

// GPT-2's bytes_to_unicode: every byte as a printable character in UTF-8 (its own for printable
// Latin-1, 256 + n for the others), so that BPE works on text without whitespace or controls.
const std::array<std::string, 256>& byte_symbols();

// A pattern that cuts text into pieces: each match, and each run of text between matches, is a
// piece in order (Hugging Face's Split behaviour "Isolated"). PCRE2 with Unicode properties,
// compiled by its JIT, searching on as Oniguruma does (the tokenizers package's engine: ^ and $
// match at line ends, the search after an empty match starts one character later); invalid
// UTF-8 matches nothing, so it ends up in the pieces between matches. Error naming `source`
// when a search fails (PCRE2's limits).
class SplitPattern {
 public:
  // `literal`: the pattern is a plain string. `source` names where it comes from in errors.
  SplitPattern(const std::string& pattern, bool literal, const std::string& source);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

 private:
  std::string source_;
  pcre2_real_code_8* code_ = nullptr;
  pcre2_real_match_data_8* match_ = nullptr;  // one match at a time: not for several threads
};

// One merge of a BPE's merges list: two symbols that become one.
struct BpeMerge {
  std::string left, right;
};

class ByteLevelBpe {
 public:
  // `vocabulary`: token (in byte symbols) -> id; `merges` in rank order (the first merges first;
  // a pair listed twice takes its last rank); `ignore_merges`: a piece that is a token is that
  // token without merging (Llama 3's). Error naming `source` when a byte's symbol is not in the
  // vocabulary, an id is outside 0 to 2^31 - 1 or given twice, or a merge's symbols or result
  // are not tokens.
  ByteLevelBpe(const std::unordered_map<std::string, int64_t>& vocabulary, const std::vector<BpeMerge>& merges,
               bool ignore_merges, const std::string& source);

  // Appends the ids of one piece of text (any bytes).
  void encode(std::string_view piece, std::vector<int64_t>& ids) const;
  // The bytes token `id` stands for; nullptr for an id not in the vocabulary. A token whose
  // characters are not all byte symbols (a special token written in the vocabulary) stands
  // for its own text.
  const std::string* bytes_of(int64_t id) const;
  // The id of a token spelt as it is in the vocabulary; -1 if it is not there.
  int64_t id_of(const std::string& token) const;
  int64_t vocab_size() const { return vocab_size_; }  // the highest id + 1

 private:
  std::vector<int64_t> merge(std::vector<int64_t> word) const;

  std::array<int64_t, 256> byte_ids_{};
  // (left id << 32 | right id) -> (rank, merged id); ids are below 2^31
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;
  std::unordered_map<std::string, int64_t> ids_;
  std::unordered_map<int64_t, std::string> bytes_;
  int64_t vocab_size_ = 0;
  bool ignore_merges_ = false;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;  // short piece -> ids; pieces repeat
};

}  // namespace trident
