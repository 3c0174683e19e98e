// Megatron's memory-mapped indexed dataset (.bin tokens + .idx index, header "MMIDIDX").
//
// .idx layout (little endian): 9-byte magic "MMIDIDX\0\0", uint64 version = 1, uint8 dtype code
// (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), uint64 sequence
// count N, uint64 document count D, int32 lengths[N], int64 byte pointers[N], int64
// document_indices[D] (sequence index where each document starts, then N).
// .bin: every sequence's tokens, one after another, in that dtype.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/files.h"
#include "core/publication.h"

namespace trident {

enum class TokenType : uint8_t { uint8 = 1, int8 = 2, int16 = 3, int32 = 4, int64 = 5, uint16 = 8 };

size_t token_bytes(TokenType type);
// The narrowest type Megatron would pick for a vocabulary: uint8 for bytes, uint16, else int32.
TokenType token_type_for_vocab(int64_t vocab_size);

class IndexedDatasetWriter {
 public:
  // Stages <prefix>.bin and, in finish(), <prefix>.idx in `files`, to be published with the
  // tokenizer's files (core/publication.h); without `files`, finish() publishes the two itself.
  // Destroyed unpublished, nothing it wrote stays behind.
  IndexedDatasetWriter(std::string prefix, TokenType type, Publication* files = nullptr);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document of one sequence (the common case for GPT pre-training data).
  void add_document(const int64_t* tokens, size_t count);
  void finish();

 private:
  std::string prefix_;
  TokenType type_;
  std::unique_ptr<Publication> own_files_;
  Publication* files_;
  std::unique_ptr<FileWriter> bin_;
  std::vector<uint8_t> packed_;  // documents in the token type, written a megabyte at a time
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_starts_{0};
};

class IndexedDataset {
 public:
  // Maps <prefix>.bin and <prefix>.idx; throws Error naming the file on anything malformed.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  TokenType type() const { return type_; }
  size_t num_sequences() const { return lengths_.size(); }
  size_t num_documents() const { return document_starts_.size() - 1; }
  // All sequences laid end to end form one token stream of this length.
  int64_t num_tokens() const { return num_tokens_; }
  const std::vector<int32_t>& sequence_lengths() const { return lengths_; }
  const std::vector<int64_t>& document_starts() const { return document_starts_; }

  // Copies tokens [offset, offset + count) of the stream into `out` as int64.
  void read(int64_t offset, int64_t count, int64_t* out) const;
  const std::string& bin_path() const { return bin_path_; }

 private:
  std::string bin_path_;
  TokenType type_ = TokenType::uint8;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_starts_;
  int64_t num_tokens_ = 0;
  const uint8_t* bin_ = nullptr;
  size_t bin_size_ = 0;
};

// Entropy, in nats, of the distribution given by token counts: the loss of the best model
// that ignores context, so a language model must go below it.
double unigram_entropy_nats(const std::vector<int64_t>& counts);

}  // namespace trident
