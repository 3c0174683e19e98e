// Fine-tuning on (prompt, answer) pairs a program holds in memory, the loss on the answers only:
// a trident::ProgramSamples of its own with loss masks, handed to the Trainer (data.type=program).
// Trident reads sample i of the global batch on whichever DP rank it falls to, so the run is the
// same at any layout, and a resumed run goes on where it stopped.
//   finetune_answers [section.key=value ...]
//   mpirun -np 4 finetune_answers parallel.tensor=2 parallel.pipeline=2
#include <trident/trident.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kEnd = 0;  // the end-of-answer token (and the padding after it)

// Byte tokens: the prompt, the answer, then kEnd to the end of the sample. The loss counts where
// the next token is the answer's or its end.
class AnswerSamples : public trident::ProgramSamples {
 public:
  AnswerSamples(std::vector<std::pair<std::string, std::string>> pairs, int64_t seq_length)
      : pairs_(std::move(pairs)), seq_length_(seq_length) {
    for (const auto& [prompt, answer] : pairs_)
      if (prompt.empty() || int64_t(prompt.size() + answer.size()) + 1 > seq_length + 1)
        trident::fail("the pair '", prompt, answer, "' does not fit model.seq_length + 1 = ", seq_length + 1, " tokens");
  }
  int64_t size() const override { return int64_t(pairs_.size()); }
  std::vector<int64_t> sample(int64_t index) const override {
    const auto& [prompt, answer] = pairs_[size_t(index % size())];
    std::vector<int64_t> tokens(size_t(seq_length_ + 1), kEnd);
    size_t i = 0;
    for (const char c : prompt + answer) tokens[i++] = static_cast<unsigned char>(c);
    return tokens;
  }
  bool has_loss_mask() const override { return true; }
  std::vector<uint8_t> loss_mask(int64_t index) const override {
    const auto& [prompt, answer] = pairs_[size_t(index % size())];
    // Target i is token i + 1: the answer's tokens are targets P - 1 .. P + A - 2, its end P + A - 1.
    const int64_t first = int64_t(prompt.size()) - 1, last = int64_t(prompt.size() + answer.size()) - 1;
    std::vector<uint8_t> mask(static_cast<size_t>(seq_length_));
    for (int64_t i = 0; i < seq_length_; ++i) mask[size_t(i)] = i >= first && i <= last;
    return mask;
  }

 private:
  std::vector<std::pair<std::string, std::string>> pairs_;
  int64_t seq_length_;
};

// "a+b=" -> "c" for a, b below 30; every seventh pair is held out for validation.
std::pair<AnswerSamples, AnswerSamples> additions(int64_t seq_length) {
  std::vector<std::pair<std::string, std::string>> train, valid;
  for (int a = 0; a < 30; ++a)
    for (int b = 0; b < 30; ++b)
      ((a * 30 + b) % 7 == 0 ? valid : train)
          .emplace_back(std::to_string(a) + "+" + std::to_string(b) + "=", std::to_string(a + b));
  return {AnswerSamples(train, seq_length), AnswerSamples(valid, seq_length)};
}

const char* const kConfig = R"(
model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 16, vocab_size: 256,
        hidden_dropout: 0.0, attention_dropout: 0.0}
batch: {micro_batch_size: 4, global_batch_size: 32}
data: {type: program}
optimizer: {lr: 3.0e-3, warmup_iters: 5}
train: {iters: 30, log_interval: 10, eval_interval: 30, eval_iters: 2}
)";

}  // namespace

int main(int argc, char** argv) {
  trident::LaunchInfo launch;
  try {
    launch = trident::detect_launch();
    const trident::Config config = trident::Config::parse(kConfig, std::vector<std::string>(argv + 1, argv + argc));
    const auto [train, valid] = additions(config.model.seq_length);
    trident::SampleSource source;
    source.train = std::make_shared<AnswerSamples>(train);
    source.valid = std::make_shared<AnswerSamples>(valid);
    trident::Trainer trainer(config, source, launch);
    const trident::TrainingEnd end = trainer.train();
    const double held_out = trainer.evaluate();  // collective: every rank calls it
    if (launch.rank == 0) std::printf("finetune_answers: the loss on held-out answers is %.4f\n", held_out);
    return end.exit_code;
  } catch (const std::exception& e) {
    return trident::report_failure(e, int(launch.world_size));
  }
}
