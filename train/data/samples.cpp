#include "train/data/samples.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "core/hash.h"
#include "train/data/indexed_dataset.h"
#include "train/data/tokenizer.h"

namespace fs = std::filesystem;

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
  const TokenizerRecord* tokenizer() const override { return tokenizer_ ? &*tokenizer_ : nullptr; }

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
  if (data.type == DataType::synthetic) return std::make_shared<SyntheticTokenStream>(vocab_size, seed);
  return std::make_shared<IndexedTokenStream>(data.path, vocab_size);
}

GPTSamples::GPTSamples(std::shared_ptr<TokenStream> stream, int64_t begin, int64_t end, int64_t seq_length,
                       int64_t vocab_size, uint64_t seed, std::string order_cache, int64_t in_memory_limit)
    : Samples(seq_length),
      stream_(std::move(stream)),
      begin_(begin),
      vocab_size_(vocab_size),
      num_samples_(std::max<int64_t>(0, (end - begin - 1) / seq_length)),
      seed_(seed),
      order_cache_(std::move(order_cache)),
      in_memory_limit_(in_memory_limit) {}

const SampleOrder& GPTSamples::order_for_epoch(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_order_.reset();  // one epoch's order at a time
    cached_order_ = std::make_unique<SampleOrder>(num_samples_, seed_, epoch, order_cache_, in_memory_limit_);
    cached_epoch_ = epoch;
  }
  return *cached_order_;
}

void GPTSamples::sample(int64_t index, int64_t* out) const {
  const int64_t within = order_for_epoch(index / num_samples_)[index % num_samples_];
  const int64_t offset = begin_ + within * seq_length_;
  stream_->read(offset, seq_length_ + 1, out);
  for (int64_t i = 0; i <= seq_length_; ++i)
    if (out[i] < 0 || out[i] >= vocab_size_)
      fail("token id ", out[i], " at position ", offset + i, " of ", stream_->describe(),
           " is outside model.vocab_size (", vocab_size_, ")");
}

void Samples::loss_mask(int64_t, uint8_t*) const {
  TRIDENT_CHECK(false, "loss_mask() of samples that have none (has_loss_mask() is false)");
}

Batch Samples::batch(int64_t first, int64_t count) const {
  auto rows = torch::empty({count, seq_length_ + 1}, torch::kLong);
  int64_t* data = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) sample(first + i, data + i * (seq_length_ + 1));
  Batch batch{rows.narrow(1, 0, seq_length_).contiguous(), rows.narrow(1, 1, seq_length_).contiguous(), {}};
  if (has_loss_mask()) {
    batch.loss_mask = torch::empty({count, seq_length_}, torch::kUInt8);
    for (int64_t i = 0; i < count; ++i) loss_mask(first + i, batch.loss_mask.data_ptr<uint8_t>() + i * seq_length_);
  }
  return batch;
}

BlendedSamples::BlendedSamples(std::vector<std::shared_ptr<const Samples>> parts, std::vector<double> weights,
                               int64_t seq_length)
    : Samples(seq_length), parts_(std::move(parts)), weights_(std::move(weights)) {
  TRIDENT_CHECK(parts_.size() == weights_.size() && !parts_.empty(), parts_.size(), " parts, ", weights_.size(),
                " weights");
  taken_at_block_.push_back(std::vector<int64_t>(parts_.size(), 0));
}

int64_t BlendedSamples::size() const {
  int64_t total = 0;
  for (const auto& part : parts_) total += part->size();
  return total;
}

size_t BlendedSamples::choose(int64_t index, const std::vector<int64_t>& taken) const {
  const double samples = std::max(double(index), 1.0);
  size_t best = 0;
  double best_lag = weights_[0] * samples - double(taken[0]);
  for (size_t d = 1; d < parts_.size(); ++d) {
    const double lag = weights_[d] * samples - double(taken[d]);
    if (lag > best_lag) best = d, best_lag = lag;
  }
  return best;
}

std::pair<size_t, int64_t> BlendedSamples::source(int64_t index) const {
  TRIDENT_CHECK(index >= 0, "sample ", index);
  const int64_t block = index / kBlock;
  while (int64_t(taken_at_block_.size()) <= block) {  // the state at each block start, once
    std::vector<int64_t> taken = taken_at_block_.back();
    const int64_t start = (int64_t(taken_at_block_.size()) - 1) * kBlock;
    for (int64_t i = start; i < start + kBlock; ++i) ++taken[choose(i, taken)];
    taken_at_block_.push_back(std::move(taken));
  }
  if (block != block_) {
    std::vector<int64_t> taken = taken_at_block_[size_t(block)];
    block_sources_.clear();
    for (int64_t i = block * kBlock; i < (block + 1) * kBlock; ++i) {
      const size_t d = choose(i, taken);
      block_sources_.emplace_back(d, taken[d]++);
    }
    block_ = block;
  }
  return block_sources_[size_t(index - block * kBlock)];
}

void BlendedSamples::sample(int64_t index, int64_t* out) const {
  const auto [part, within] = source(index);
  parts_[part]->sample(within, out);
}

namespace {

// Where dataset `prefix`'s orders of many samples are kept (SampleOrder): data.cache_dir, else
// beside the dataset (synthetic tokens: the system's temporary folder). The order depends only on
// the number of samples, the seed and the epoch, so datasets may share a folder.
std::string order_cache(const DataConfig& data, const std::string& prefix) {
  const std::string name = prefix.empty() ? "trident-synthetic" : prefix;
  if (!data.cache_dir.empty()) return (fs::path(data.cache_dir) / fs::path(name).filename()).string();
  return prefix.empty() ? (fs::temp_directory_path() / name).string() : prefix;
}

// The datasets of a run must share a tokenizer: the same type, ids and files.
void check_same_tokenizer(const std::vector<DatasetPart>& datasets) {
  const DatasetPart& first = datasets.front();
  const TokenizerRecord* expected = first.stream->tokenizer();
  const auto describe = [](const DatasetPart& part) {
    const TokenizerRecord* record = part.stream->tokenizer();
    return record ? str(record->describe(), " (", record->source, ")") : str("no tokenizer recorded");
  };
  for (const DatasetPart& part : datasets) {
    const TokenizerRecord* record = part.stream->tokenizer();
    bool same = (record == nullptr) == (expected == nullptr);
    if (same && record)
      same = record->type == expected->type && record->vocab_size == expected->vocab_size &&
             record->end_of_document == expected->end_of_document && record->files.size() == expected->files.size();
    for (size_t i = 0; same && record && i < record->files.size(); ++i)
      same = read_text_file(record->files[i], "tokenizer file") == read_text_file(expected->files[i], "tokenizer file");
    if (!same)
      fail("dataset '", part.name, "' was made with another tokenizer than '", first.name, "': ", describe(part),
           " against ", describe(first), "; the datasets of data.path and data.valid_path must share one");
  }
}

}  // namespace

GPTData::GPTData(const Config& config) {
  if (config.data.type == DataType::program)
    fail("data.type=program needs a program that gives the Trainer its samples (trident::SampleSource, ",
         "docs/library.md); the train program reads data.type=indexed or synthetic");
  const auto& m = config.model;
  const bool synthetic = config.data.type == DataType::synthetic;
  const std::vector<BlendPart> blend = synthetic ? std::vector<BlendPart>{{1.0, ""}} : data_blend(config.data.path);
  const bool held_out = config.data.valid_path.empty();  // validation from each dataset's last part
  const auto open = [&](const BlendPart& blended) {
    DataConfig data = config.data;
    data.path = blended.prefix;
    return DatasetPart{blended.prefix, blended.weight, open_token_stream(data, m.vocab_size, config.train.seed), {}, {}};
  };
  for (size_t d = 0; d < blend.size(); ++d) {
    DatasetPart part = open(blend[d]);
    const int64_t total = part.stream->size();
    const int64_t valid_tokens = held_out ? int64_t(double(total) * config.data.valid_fraction) : 0;
    const int64_t train_end = total - valid_tokens;
    const uint64_t seed = config.train.seed + 2 * d;  // the first dataset's: a single dataset's as before blends
    part.train = std::make_shared<GPTSamples>(part.stream, 0, train_end, m.seq_length, m.vocab_size, seed,
                                              order_cache(config.data, part.name));
    if (part.train->size() == 0)
      fail(part.stream->describe(), " is too small: its training part holds ", train_end,
           " tokens, fewer than one sample of model.seq_length + 1 = ", m.seq_length + 1);
    if (valid_tokens > 0) {
      part.valid = std::make_shared<GPTSamples>(part.stream, train_end, total, m.seq_length, m.vocab_size, seed + 1,
                                                order_cache(config.data, part.name));
      if (part.valid->size() == 0)
        fail(part.stream->describe(), ": the validation part (data.valid_fraction = ", config.data.valid_fraction,
             ", ", valid_tokens, " tokens) holds no sample of model.seq_length + 1 tokens; raise data.valid_fraction");
      validation.push_back(part);
    }
    datasets.push_back(std::move(part));
  }
  if (!held_out) {
    const std::vector<BlendPart> valid_blend = data_blend(config.data.valid_path, "data.valid_path");
    for (size_t d = 0; d < valid_blend.size(); ++d) {
      DatasetPart part = open(valid_blend[d]);
      const int64_t total = part.stream->size();
      part.valid = std::make_shared<GPTSamples>(part.stream, 0, total, m.seq_length, m.vocab_size,
                                                config.train.seed + 2 * d + 1, order_cache(config.data, part.name));
      if (part.valid->size() == 0)
        fail(part.stream->describe(), " (data.valid_path) holds no sample of model.seq_length + 1 = ", m.seq_length + 1,
             " tokens");
      validation.push_back(std::move(part));
    }
  }
  std::vector<DatasetPart> all = datasets;
  if (!held_out) all.insert(all.end(), validation.begin(), validation.end());
  check_same_tokenizer(all);
  if (const std::string key = config.data.end_of_document_key(); !key.empty()) {
    const TokenizerRecord* tokenizer = datasets.front().stream->tokenizer();
    if (!tokenizer)
      fail(key, " needs the end-of-document token, but dataset '", datasets.front().name,
           "' records no tokenizer (no ", datasets.front().name, ".tokenizer.json: made by another program?)");
    end_of_document = tokenizer->end_of_document;
  }
  if (datasets.size() == 1) {
    train = datasets.front().train;
    return;
  }
  std::vector<std::shared_ptr<const Samples>> parts;
  std::vector<double> weights;
  for (const auto& part : datasets) parts.push_back(part.train), weights.push_back(part.weight);
  train = std::make_shared<BlendedSamples>(std::move(parts), std::move(weights), m.seq_length);
}

GPTData::GPTData(const Config& config, const SampleSource& source) {
  if (config.data.type != DataType::program)
    fail("the program gave the Trainer its own samples, but data.type is '", config.data.type,
         "': set data.type=program");
  if (!source.train) fail("data.type=program: the program's SampleSource has no train samples");
  const auto& m = config.model;
  train = checked_program_samples(source.train, m.seq_length, m.vocab_size, "the program's train samples");
  if (source.valid)
    validation.push_back({"program", 1, nullptr, nullptr,
                          checked_program_samples(source.valid, m.seq_length, m.vocab_size,
                                                  "the program's validation samples")});
  if (config.train.eval_interval > 0 && !source.valid)
    fail("train.eval_interval is set but the program's SampleSource has no validation samples (valid)");
  if (const std::string key = config.data.end_of_document_key(); !key.empty()) {
    if (source.end_of_document < 0 || source.end_of_document >= config.model.vocab_size)
      fail(key, " needs the end-of-document token: set SampleSource::end_of_document (got ", source.end_of_document, ")");
    end_of_document = source.end_of_document;
  }
}

PackedDocuments packed_documents(const torch::Tensor& tokens, int64_t end_of_document) {
  //   tokens     a  b  E  c  d        ends    0 0 1 0 0      ids = ends before: 0 0 0 1 1
  //   index      0  1  2  3  4        starts  0 0 3 0 0      (where the next document starts)
  //   first index of the document: the largest start before the token, 0 0 0 3 3
  //   positions = index - first:   0 1 2 0 1
  const auto ends = tokens.eq(end_of_document).to(torch::kLong);
  const auto index = torch::arange(tokens.size(1), tokens.options().dtype(torch::kLong)).expand_as(ends);
  const auto starts = ends * (index + 1);
  const auto before = torch::cat({torch::zeros_like(starts.narrow(1, 0, 1)), starts.narrow(1, 0, tokens.size(1) - 1)}, 1);
  return {ends.cumsum(1) - ends, index - std::get<0>(before.cummax(1))};
}

std::string GPTData::describe() const {
  if (datasets.empty()) return "the program's samples (data.type=program)";
  if (datasets.size() == 1) return datasets.front().stream->describe();
  std::string text = str("a blend of ", datasets.size(), " datasets:");
  for (const auto& part : datasets) text += str(" ", part.weight, " x ", part.stream->describe(), ";");
  text.pop_back();
  return text;
}

}  // namespace trident
