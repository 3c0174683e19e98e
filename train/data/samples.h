// GPT training samples: a token stream cut into sequences of seq_length + 1 tokens, split into
// train and validation ranges, visited in a seeded shuffled order, epoch after epoch; several
// datasets blended by weight as Megatron blends them.
//
// Which sample a rank reads is a pure function of (consumed samples, micro-batch, DP rank), so
// resuming needs only the consumed-sample count and any DP size sees the same global batch.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "train/data/program_samples.h"
#include "train/data/sample_order.h"

namespace trident {

class IndexedDataset;
struct TokenizerRecord;

// Where tokens come from: a memory-mapped indexed dataset or a seeded random generator.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual int64_t size() const = 0;
  virtual void read(int64_t offset, int64_t count, int64_t* out) const = 0;
  virtual std::string describe() const = 0;
  // What PREFIX.tokenizer.json records of the tokenizer that made it; null when unknown.
  virtual const TokenizerRecord* tokenizer() const { return nullptr; }
};

std::shared_ptr<TokenStream> open_token_stream(const DataConfig& data, int64_t vocab_size,
                                               uint64_t seed);

struct Batch {
  torch::Tensor tokens;     // [micro_batch, seq] int64
  torch::Tensor targets;    // [micro_batch, seq] int64, tokens shifted by one
  torch::Tensor loss_mask;  // [micro_batch, seq] uint8, 1 where a target counts; undefined: all count
};

// An endless order of samples of seq_length + 1 tokens: what training reads, by index. The
// built-in datasets (GPTSamples, BlendedSamples) are samples; a program's own
// (train/data/program_samples.h) are read through one that checks them. Sample `index` must be a
// pure function of `index` (any epoch: index may exceed size()), so that every rank reads its
// part of each global batch and a resumed or re-laid-out run reads the same samples.
class Samples {
 public:
  explicit Samples(int64_t seq_length) : seq_length_(seq_length) {}
  virtual ~Samples() = default;
  virtual int64_t size() const = 0;  // samples in one epoch
  // The sample at position `index` of the order: seq_length + 1 tokens.
  virtual void sample(int64_t index, int64_t* out) const = 0;
  // Whether samples carry loss masks; then loss_mask writes sample `index`'s seq_length values,
  // out[i] = 1 where the loss of predicting token i + 1 counts, 0 where it does not.
  virtual bool has_loss_mask() const { return false; }
  virtual void loss_mask(int64_t index, uint8_t* out) const;
  // Samples [first, first + count) of the order, as one batch.
  Batch batch(int64_t first, int64_t count) const;
  int64_t seq_length() const { return seq_length_; }

 protected:
  int64_t seq_length_;
};

class GPTSamples : public Samples {
 public:
  // Samples from tokens [begin, end) of the stream. `order_cache`: where an epoch's order of
  // many samples is kept as a file (SampleOrder); empty: in memory however many.
  GPTSamples(std::shared_ptr<TokenStream> stream, int64_t begin, int64_t end, int64_t seq_length,
             int64_t vocab_size, uint64_t seed, std::string order_cache = "",
             int64_t in_memory_limit = SampleOrder::kInMemoryLimit);

  int64_t size() const override { return num_samples_; }
  // The sample at position `index` of the endless shuffled order (epoch = index / size()).
  void sample(int64_t index, int64_t* out) const override;

 private:
  const SampleOrder& order_for_epoch(int64_t epoch) const;

  std::shared_ptr<TokenStream> stream_;
  int64_t begin_, vocab_size_, num_samples_;
  uint64_t seed_;
  std::string order_cache_;
  int64_t in_memory_limit_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::unique_ptr<SampleOrder> cached_order_;
};

// Several datasets' samples interleaved by weight, as Megatron's BlendedDataset interleaves
// them: sample i comes from the dataset furthest behind its share of the samples so far (the
// largest weight * max(i, 1) - samples taken; the first such dataset on a tie) and is that
// dataset's next sample. Every prefix of the order follows the weights to within one sample
// per dataset. The state is kept every kBlock samples, so finding sample i costs at most one
// block's steps and memory stays small however long the run.
class BlendedSamples : public Samples {
 public:
  // `weights` sum to 1, one per part.
  BlendedSamples(std::vector<std::shared_ptr<const Samples>> parts, std::vector<double> weights, int64_t seq_length);

  int64_t size() const override;  // the parts' sizes summed
  void sample(int64_t index, int64_t* out) const override;
  // Which part blend sample `index` comes from, and which of that part's samples it is.
  std::pair<size_t, int64_t> source(int64_t index) const;

  static constexpr int64_t kBlock = 4096;

 private:
  // One step of the blend: the part that sample `index` takes, given the samples taken so far.
  size_t choose(int64_t index, const std::vector<int64_t>& taken) const;

  std::vector<std::shared_ptr<const Samples>> parts_;
  std::vector<double> weights_;
  mutable std::vector<std::vector<int64_t>> taken_at_block_;  // samples taken before block k
  mutable int64_t block_ = -1;                                  // the block decoded below
  mutable std::vector<std::pair<size_t, int64_t>> block_sources_;
};

// One dataset of data.path: its share of the blend, its tokens, and its samples.
struct DatasetPart {
  std::string name;  // the prefix data.path gives it
  double weight = 1;
  std::shared_ptr<TokenStream> stream;
  std::shared_ptr<GPTSamples> train;
  std::shared_ptr<const Samples> valid;  // null when it does not validate
};

// Documents packed into samples: for tokens [b, s], each token's document (how many
// end-of-document tokens come before it: that token is its document's last) and its position in
// its document. As Megatron's get_ltor_masks_and_position_ids with reset_attention_mask and
// reset_position_ids.
struct PackedDocuments {
  torch::Tensor ids, positions;  // [b, s] int64
};
PackedDocuments packed_documents(const torch::Tensor& tokens, int64_t end_of_document);

// Train and validation samples of one config.
struct GPTData {
  GPTData(const Config& config);
  // data.type=program: the program's own samples, each checked as it is read (token ids within
  // model.vocab_size, masks of 0 and 1).
  GPTData(const Config& config, const SampleSource& source);
  std::vector<DatasetPart> datasets;    // one per prefix of data.path
  std::vector<DatasetPart> validation;  // those that validate (their `valid`): data.path's held-out
                                        // parts, or data.valid_path's datasets read whole
  std::shared_ptr<const Samples> train;  // the datasets' train samples blended (the one dataset's own)
  int64_t end_of_document = -1;       // the tokenizer's, when data.eod_mask_loss or data.reset_* needs it
  bool validates() const { return !validation.empty(); }
  std::string describe() const;
};

// Position in the shuffled order of sample j of micro-batch m for DP rank r: each micro-step
// consumes micro_batch * dp samples, rank r taking its contiguous slice of them.
inline int64_t sample_position(int64_t consumed, int64_t micro_step, int64_t micro_batch,
                               int64_t dp_rank, int64_t dp_size) {
  return consumed + (micro_step * dp_size + dp_rank) * micro_batch;
}

}  // namespace trident
