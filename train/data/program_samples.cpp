#include "train/data/program_samples.h"

#include <algorithm>

#include "core/error.h"
#include "train/data/samples.h"

namespace trident {

std::vector<uint8_t> ProgramSamples::loss_mask(int64_t) const { return {}; }

namespace {

// A program's samples as Samples: each copied into trident's buffer only once its length and
// values are known to be right (a wrong id would otherwise index past the embedding).
class CheckedSamples : public Samples {
 public:
  CheckedSamples(std::shared_ptr<const ProgramSamples> inner, int64_t seq_length, int64_t vocab_size, std::string name)
      : Samples(seq_length), inner_(std::move(inner)), vocab_size_(vocab_size), name_(std::move(name)) {}
  int64_t size() const override { return inner_->size(); }
  void sample(int64_t index, int64_t* out) const override {
    const std::vector<int64_t> tokens = inner_->sample(index);
    if (int64_t(tokens.size()) != seq_length_ + 1)
      fail(name_, ": sample ", index, " has ", tokens.size(), " tokens, but model.seq_length + 1 = ", seq_length_ + 1,
           " were expected");
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= vocab_size_)
        fail(name_, ": sample ", index, ": token id ", tokens[i], " at position ", i, " is outside model.vocab_size (",
             vocab_size_, ")");
    std::copy(tokens.begin(), tokens.end(), out);
  }
  bool has_loss_mask() const override { return inner_->has_loss_mask(); }
  void loss_mask(int64_t index, uint8_t* out) const override {
    const std::vector<uint8_t> mask = inner_->loss_mask(index);
    if (int64_t(mask.size()) != seq_length_)
      fail(name_, ": the loss mask of sample ", index, " has ", mask.size(), " values, but model.seq_length = ",
           seq_length_, " were expected (one per target)");
    for (size_t i = 0; i < mask.size(); ++i)
      if (mask[i] > 1)
        fail(name_, ": the loss mask of sample ", index, " has the value ", int(mask[i]), " at position ", i,
             ", neither 0 nor 1");
    std::copy(mask.begin(), mask.end(), out);
  }

 private:
  std::shared_ptr<const ProgramSamples> inner_;
  int64_t vocab_size_;
  std::string name_;
};

}  // namespace

std::shared_ptr<const Samples> checked_program_samples(std::shared_ptr<const ProgramSamples> samples,
                                                       int64_t seq_length, int64_t vocab_size, std::string name) {
  if (samples->size() <= 0) fail(name, " hold no sample (size() is ", samples->size(), ")");
  auto checked = std::make_shared<CheckedSamples>(std::move(samples), seq_length, vocab_size, std::move(name));
  // The first sample now, before the model is built: a program whose samples are all of the
  // wrong length hears so at once.
  std::vector<int64_t> tokens(size_t(seq_length + 1));
  checked->sample(0, tokens.data());
  if (checked->has_loss_mask()) {
    std::vector<uint8_t> mask(static_cast<size_t>(seq_length));
    checked->loss_mask(0, mask.data());
  }
  return checked;
}

}  // namespace trident
