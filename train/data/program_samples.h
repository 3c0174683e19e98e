// A program's own training data (data.type=program, docs/library.md): samples handed to the
// Trainer by value, so that a program never writes into a buffer of trident's. Each is checked as
// it is read: a sample or mask of the wrong length, a token id outside model.vocab_size or a mask
// value other than 0 and 1 is an error naming the samples, the sample and what was expected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class Samples;

// Sample `index` must be a pure function of `index` (any epoch: index may exceed size()), so
// that every rank reads its part of each global batch and a resumed or re-laid-out run reads the
// same samples.
class ProgramSamples {
 public:
  virtual ~ProgramSamples() = default;
  virtual int64_t size() const = 0;  // samples in one epoch
  // Sample `index`: model.seq_length + 1 token ids.
  virtual std::vector<int64_t> sample(int64_t index) const = 0;
  // Whether samples carry loss masks; then sample `index`'s mask: model.seq_length values, 1
  // where the loss of predicting token i + 1 counts, 0 where it does not.
  virtual bool has_loss_mask() const { return false; }
  virtual std::vector<uint8_t> loss_mask(int64_t index) const;
};

// What a program gives the Trainer in place of data.path: its training samples, optionally
// validation samples, and the end-of-document token where data.eod_mask_loss or data.reset_*
// need one.
struct SampleSource {
  std::shared_ptr<const ProgramSamples> train;
  std::shared_ptr<const ProgramSamples> valid;  // null: no validation
  int64_t end_of_document = -1;
};

// `samples` as trident's Samples of `seq_length` + 1 tokens, each checked as it is read; their
// first sample (and mask) checked now. `name` says whose they are in errors ("the program's train
// samples").
std::shared_ptr<const Samples> checked_program_samples(std::shared_ptr<const ProgramSamples> samples,
                                                       int64_t seq_length, int64_t vocab_size, std::string name);

}  // namespace trident
