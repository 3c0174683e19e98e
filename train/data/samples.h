// GPT training samples: a token stream cut into sequences of seq_length + 1 tokens, split into
// train and validation ranges, visited in a seeded shuffled order, epoch after epoch.
//
// Which sample a rank reads is a pure function of (consumed samples, micro-batch, DP rank), so
// resuming needs only the consumed-sample count and any DP size sees the same global batch.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/config.h"

namespace trident {

class IndexedDataset;

// Where tokens come from: a memory-mapped indexed dataset or a seeded random generator.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual int64_t size() const = 0;
  virtual void read(int64_t offset, int64_t count, int64_t* out) const = 0;
  virtual std::string describe() const = 0;
};

std::shared_ptr<TokenStream> open_token_stream(const DataConfig& data, int64_t vocab_size,
                                               uint64_t seed);

struct Batch {
  torch::Tensor tokens;   // [micro_batch, seq] int64
  torch::Tensor targets;  // [micro_batch, seq] int64, tokens shifted by one
};

class GPTSamples {
 public:
  // Samples from tokens [begin, end) of the stream.
  GPTSamples(std::shared_ptr<TokenStream> stream, int64_t begin, int64_t end, int64_t seq_length,
             int64_t vocab_size, uint64_t seed);

  int64_t size() const { return num_samples_; }
  // The sample at position `index` of the endless shuffled order (epoch = index / size()).
  void sample(int64_t index, int64_t* out) const;
  // Samples [first, first + count) of the shuffled order, as one batch.
  Batch batch(int64_t first, int64_t count) const;

 private:
  const std::vector<int64_t>& order_for_epoch(int64_t epoch) const;

  std::shared_ptr<TokenStream> stream_;
  int64_t begin_, seq_length_, vocab_size_, num_samples_;
  uint64_t seed_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

// Train and validation samples of one config.
struct GPTData {
  GPTData(const Config& config);
  std::shared_ptr<TokenStream> stream;
  std::unique_ptr<GPTSamples> train;
  std::unique_ptr<GPTSamples> valid;  // null when data.valid_fraction is 0
};

// Position in the shuffled order of sample j of micro-batch m for DP rank r: each micro-step
// consumes micro_batch * dp samples, rank r taking its contiguous slice of them.
inline int64_t sample_position(int64_t consumed, int64_t micro_step, int64_t micro_batch,
                               int64_t dp_rank, int64_t dp_size) {
  return consumed + (micro_step * dp_size + dp_rank) * micro_batch;
}

}  // namespace trident
