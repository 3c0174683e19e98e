// Text <-> token ids, one interface for the tokenizers a dataset can be made with:
//  - byte-level: one token per byte (ids 0-255), a document's end marked by byte 0;
//  - SentencePiece BPE (Debian's libsentencepiece), trained on the corpus or given as a .model;
//  - GPT-2's byte-level BPE from vocab.json and merges.txt (Megatron's GPT2BPETokenizer files);
//  - a byte-level BPE from Hugging Face's tokenizer.json (Llama 3's, Qwen's, GPT-2's).
// A dataset records which one made it in PREFIX.tokenizer.json beside its .bin/.idx, with the
// tokenizer's own files copied beside it, so that training, generation and export use the same
// one wherever the dataset goes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/publication.h"

namespace trident {

// "SentencePiece BPE (2000 ids)" for type "sentencepiece" (the names in PREFIX.tokenizer.json:
// "byte", "sentencepiece", "gpt2-bpe", "hf-bpe").
std::string describe_tokenizer(const std::string& type, int64_t vocab_size);

// Not for several threads at once: encoders keep caches and buffers (clone() one per thread).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // An equal tokenizer, giving the same ids, for another thread.
  virtual std::unique_ptr<Tokenizer> clone() const = 0;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;       // every id is below it
  virtual int64_t end_of_document() const = 0;  // the id that ends each document
  virtual std::string type() const = 0;         // as PREFIX.tokenizer.json names it
  std::string describe() const { return describe_tokenizer(type(), vocab_size()); }
  // Stages the tokenizer's own files for dataset `prefix` and PREFIX.tokenizer.json naming them
  // in `files`, to be published with the dataset (core/publication.h).
  void save(const std::string& prefix, Publication& files) const;
  // The same, published at once.
  void save(const std::string& prefix) const;

 protected:
  // PREFIX.model, PREFIX.vocab.json + PREFIX.merges.txt, PREFIX.hf-tokenizer.json, each written
  // where `files` stages it: returns their final paths.
  virtual std::vector<std::string> write_files(const std::string& prefix, Publication& files) const = 0;
};

std::unique_ptr<Tokenizer> byte_tokenizer();

// SentencePiece BPE of `vocab_size` ids trained on the lines of `files`: exact round trips of
// UTF-8 text (identity normalisation, whitespace kept, byte fallback for characters it has not
// seen); SentencePiece reads UTF-8, so each byte that is not comes back as U+FFFD.
std::unique_ptr<Tokenizer> train_sentencepiece(const std::vector<std::string>& files, int64_t vocab_size);
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_file);

// GPT-2's byte-level BPE; `<|endoftext|>` must be in the vocabulary (it ends documents).
std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_json, const std::string& merges_txt);

// A byte-level BPE in Hugging Face's tokenizer.json, encoding as the tokenizers package's
// encode(text, add_special_tokens=False) with encode_special_tokens on: added tokens that are
// not special are split out, special ones are ids only (hf_tokenizer.cpp draws the way).
// Documents end with its special <|endoftext|>, <|end_of_text|>, </s> or <eos>. Error naming
// the key for what it cannot read as the tokenizers package would: a model other than BPE, a
// pre-tokenizer other than Split patterns then ByteLevel, a normalizer other than NFC, NFKC,
// NFD, NFKD, byte fallback, dropout, ...
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json);

// What a tokenizer writes beside dataset PREFIX: PREFIX + each of these (the sidecar, then the
// tokenizers' own files).
inline const std::vector<std::string>& tokenizer_file_suffixes() {
  static const std::vector<std::string> suffixes = {".tokenizer.json", ".model", ".vocab.json", ".merges.txt",
                                                    ".hf-tokenizer.json"};
  return suffixes;
}

// What PREFIX.tokenizer.json records, read without loading the tokenizer (training needs only
// the vocabulary size; export copies the files).
struct TokenizerRecord {
  std::string type;
  int64_t vocab_size = 0;
  int64_t end_of_document = 0;
  std::vector<std::string> files;  // paths, beside the dataset
  std::string source;              // the sidecar's path
  std::string describe() const { return describe_tokenizer(type, vocab_size); }
};

// Nothing for a dataset without a sidecar (made by another program, or by trident before it
// recorded tokenizers): its tokenizer is unknown. Error naming the file if it is malformed.
std::optional<TokenizerRecord> read_tokenizer_record(const std::string& prefix);

// The tokenizer dataset `prefix` was made with, loaded from the files beside it; error naming a
// file that is missing or malformed, or the sidecar a dataset lacks.
std::unique_ptr<Tokenizer> load_dataset_tokenizer(const std::string& prefix);

}  // namespace trident
