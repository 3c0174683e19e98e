// model/sampling.h: the choice of the next token, and generation's stopping rules.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "model/sampling.h"
#include "tests/helpers.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::tiny_model;

namespace {

std::vector<int> draw_counts(const torch::Tensor& logits, double temperature, int64_t top_k, int draws) {
  at::Generator generator = at::detail::createCPUGenerator(5);
  std::vector<int> counts(size_t(logits.numel()), 0);
  for (int i = 0; i < draws; ++i) ++counts[size_t(choose_token(logits, temperature, top_k, generator))];
  return counts;
}

}  // namespace

TEST(Sampling, TemperatureZeroAndTopOneTakeTheMostLikely) {
  const auto logits = torch::tensor({0.1, 2.0, -1.0, 1.9});
  EXPECT_EQ(draw_counts(logits, 0.0, 0, 50), (std::vector<int>{0, 50, 0, 0}));
  EXPECT_EQ(draw_counts(logits, 5.0, 1, 50), (std::vector<int>{0, 50, 0, 0}));
}

TEST(Sampling, DrawsFollowTheSoftmaxAmongTheTopK) {
  const auto probabilities = torch::tensor({0.5, 0.3, 0.15, 0.05}, torch::kDouble);
  const int draws = 4000;
  auto counts = draw_counts(probabilities.log(), 1.0, 0, draws);
  for (size_t i = 0; i < counts.size(); ++i)
    EXPECT_NEAR(double(counts[i]) / draws, probabilities[int64_t(i)].item<double>(), 0.03) << i;
  // Top 2 of 4: only the two most likely, in the ratio 5 : 3.
  counts = draw_counts(probabilities.log(), 1.0, 2, draws);
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_NEAR(double(counts[0]) / draws, 0.625, 0.03);
  // Temperature 2 flattens: p ~ sqrt(p0).
  const auto flat = probabilities.sqrt() / probabilities.sqrt().sum();
  counts = draw_counts(probabilities.log(), 2.0, 0, draws);
  EXPECT_NEAR(double(counts[3]) / draws, flat[3].item<double>(), 0.03);
}

TEST(Sampling, GenerationStopsAtMaxTokensOrTheStopToken) {
  const ModelConfig m = tiny_model();
  GPT model(m, m.padded_vocab());
  model->initialize(11);
  SamplingOptions options;
  options.max_tokens = 5;
  options.temperature = 0;
  const std::vector<int64_t> long_prompt(3 * m.seq_length, 7);  // longer than the context
  const auto greedy = generate_tokens(model, m.vocab_size, long_prompt, options);
  ASSERT_EQ(greedy.size(), 5u);
  for (int64_t id : greedy) EXPECT_LT(id, m.vocab_size);  // never a padding id
  options.stop_token = greedy.front();
  EXPECT_TRUE(generate_tokens(model, m.vocab_size, long_prompt, options).empty());

  options = {};
  options.max_tokens = 20;
  options.seed = 3;
  std::vector<int64_t> seen;
  const auto drawn = generate_tokens(model, m.vocab_size, {1, 2}, options, [&](int64_t id) { seen.push_back(id); });
  EXPECT_EQ(seen, drawn);
  EXPECT_EQ(generate_tokens(model, m.vocab_size, {1, 2}, options), drawn);  // the same seed, the same text
  options.seed = 4;
  EXPECT_NE(generate_tokens(model, m.vocab_size, {1, 2}, options), drawn);
  EXPECT_NE(error_of([&] { generate_tokens(model, m.vocab_size, {}, options); }).find("needs a prompt"), std::string::npos);
}
