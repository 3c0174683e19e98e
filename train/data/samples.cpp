#include "train/data/samples.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/hash.h"
#include "train/data/indexed_dataset.h"
#include "train/data/tokenizer.h"

namespace trident {
namespace {

class IndexedTokenStream : public TokenStream {
 public:
  // The dataset's tokenizer must fit the model: its ids index the embedding.
  IndexedTokenStream(const std::string& prefix, int64_t vocab_size)
      : dataset_(prefix), tokenizer_(read_tokenizer_record(prefix)) {
    if (tokenizer_ && tokenizer_->vocab_size > vocab_size)
      fail("model.vocab_size (", vocab_size, ") does not cover the tokenizer dataset '", prefix, "' was made with, ",
           tokenizer_->describe(), " (", tokenizer_->source, "): set model.vocab_size to at least ",
           tokenizer_->vocab_size);
  }
  int64_t size() const override { return dataset_.num_tokens(); }
  void read(int64_t offset, int64_t count, int64_t* out) const override {
    dataset_.read(offset, count, out);
  }
  std::string describe() const override {
    return str(dataset_.bin_path(), " (", dataset_.num_documents(), " documents, ", dataset_.num_tokens(),
               " tokens, ", tokenizer_ ? tokenizer_->describe() : "no tokenizer recorded", ")");
  }

 private:
  IndexedDataset dataset_;
  std::optional<TokenizerRecord> tokenizer_;
};

// Uniform random tokens, a function of position: for benchmarks that must not wait on data.
// 2^26 tokens keep the shuffled order small; the tokens are random, so epochs do not matter.
class SyntheticTokenStream : public TokenStream {
 public:
  SyntheticTokenStream(int64_t vocab, uint64_t seed) : vocab_(vocab), seed_(splitmix64(seed)) {}
  int64_t size() const override { return int64_t(1) << 26; }
  void read(int64_t offset, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = int64_t(splitmix64(seed_ ^ uint64_t(offset + i)) % uint64_t(vocab_));
  }
  std::string describe() const override { return str("synthetic uniform tokens over ", vocab_, " ids"); }

 private:
  int64_t vocab_;
  uint64_t seed_;
};

}  // namespace

std::shared_ptr<TokenStream> open_token_stream(const DataConfig& data, int64_t vocab_size,
                                               uint64_t seed) {
  if (data.type == "synthetic") return std::make_shared<SyntheticTokenStream>(vocab_size, seed);
  return std::make_shared<IndexedTokenStream>(data.path, vocab_size);
}

GPTSamples::GPTSamples(std::shared_ptr<TokenStream> stream, int64_t begin, int64_t end,
                       int64_t seq_length, int64_t vocab_size, uint64_t seed)
    : stream_(std::move(stream)),
      begin_(begin),
      seq_length_(seq_length),
      vocab_size_(vocab_size),
      num_samples_(std::max<int64_t>(0, (end - begin - 1) / seq_length)),
      seed_(seed) {}

const std::vector<int64_t>& GPTSamples::order_for_epoch(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_order_.resize(size_t(num_samples_));
    std::iota(cached_order_.begin(), cached_order_.end(), 0);
    // Fisher-Yates with a counter-based generator keyed by (seed, epoch).
    for (int64_t i = num_samples_ - 1; i > 0; --i) {
      uint64_t r = splitmix64(seed_ ^ splitmix64(uint64_t(epoch) * 0x100000001B3ull + uint64_t(i)));
      std::swap(cached_order_[size_t(i)], cached_order_[size_t(r % uint64_t(i + 1))]);
    }
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

void GPTSamples::sample(int64_t index, int64_t* out) const {
  const int64_t within = order_for_epoch(index / num_samples_)[size_t(index % num_samples_)];
  const int64_t offset = begin_ + within * seq_length_;
  stream_->read(offset, seq_length_ + 1, out);
  for (int64_t i = 0; i <= seq_length_; ++i)
    if (out[i] < 0 || out[i] >= vocab_size_)
      fail("token id ", out[i], " at position ", offset + i, " of ", stream_->describe(),
           " is outside model.vocab_size (", vocab_size_, ")");
}

Batch GPTSamples::batch(int64_t first, int64_t count) const {
  auto rows = torch::empty({count, seq_length_ + 1}, torch::kLong);
  int64_t* data = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) sample(first + i, data + i * (seq_length_ + 1));
  return {rows.narrow(1, 0, seq_length_).contiguous(), rows.narrow(1, 1, seq_length_).contiguous()};
}

GPTData::GPTData(const Config& config) {
  const auto& m = config.model;
  stream = open_token_stream(config.data, m.vocab_size, config.train.seed);
  const int64_t total = stream->size();
  const int64_t valid_tokens = int64_t(double(total) * config.data.valid_fraction);
  const int64_t train_end = total - valid_tokens;
  train = std::make_unique<GPTSamples>(stream, 0, train_end, m.seq_length, m.vocab_size,
                                       config.train.seed);
  if (train->size() == 0)
    fail(stream->describe(), " is too small: its training part holds ", train_end,
         " tokens, fewer than one sample of model.seq_length + 1 = ", m.seq_length + 1);
  if (valid_tokens > 0) {
    valid = std::make_unique<GPTSamples>(stream, train_end, total, m.seq_length, m.vocab_size,
                                         config.train.seed + 1);
    if (valid->size() == 0)
      fail(stream->describe(), ": the validation part (data.valid_fraction = ",
           config.data.valid_fraction, ", ", valid_tokens,
           " tokens) holds no sample of model.seq_length + 1 tokens; raise data.valid_fraction");
  }
}

}  // namespace trident
