// Text <-> token ids, one interface for the tokenizers a dataset can be made with:
//  - byte-level: one token per byte (ids 0-255), a document's end marked by byte 0;
//  - SentencePiece BPE (Debian's libsentencepiece), trained on the corpus or given as a .model;
//  - GPT-2's byte-level BPE from vocab.json and merges.txt (Megatron's GPT2BPETokenizer files).
// A dataset records which one made it in PREFIX.tokenizer.json beside its .bin/.idx, with the
// tokenizer's own files copied beside it, so that training, generation and export use the same
// one wherever the dataset goes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;       // every id is below it
  virtual int64_t end_of_document() const = 0;  // the id that ends each document
  virtual std::string describe() const = 0;     // "SentencePiece BPE (2000 ids)"
  // Writes the tokenizer's own files for dataset `prefix` (PREFIX.model, PREFIX.vocab.json,
  // ...) and PREFIX.tokenizer.json naming them.
  virtual void save(const std::string& prefix) const = 0;
};

std::unique_ptr<Tokenizer> byte_tokenizer();

// SentencePiece BPE of `vocab_size` ids trained on the lines of `files` (exact round trips:
// identity normalisation, whitespace kept, byte fallback for anything unseen).
std::unique_ptr<Tokenizer> train_sentencepiece(const std::vector<std::string>& files, int64_t vocab_size);
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_file);

// GPT-2's byte-level BPE; `<|endoftext|>` must be in the vocabulary (it ends documents).
std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_json, const std::string& merges_txt);

// The tokenizer dataset `prefix` was made with (PREFIX.tokenizer.json); byte-level for a dataset
// without one (made before tokenizers, or by another program). Error naming a file that is
// missing or malformed.
std::unique_ptr<Tokenizer> load_dataset_tokenizer(const std::string& prefix);

// For the tokenizers' own files: writes PREFIX.tokenizer.json with their type, vocabulary size,
// end-of-document id and files (names relative to the dataset's folder).
void write_tokenizer_sidecar(const std::string& prefix, const std::string& type, const Tokenizer& tokenizer,
                             const std::vector<std::string>& files);

}  // namespace trident
