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

// The KV cache changes how much is computed, not what: token by token, a cached forward gives
// the logits a full forward of the sequence gives at its last position (fp64, both families), and
// generation with and without the cache draws the same tokens, also after the text outgrows
// the context (where the window slides and is recomputed).
TEST(Sampling, TheKvCacheGivesTheFullForwardsLogits) {
  for (const ModelConfig& m : {tiny_model(), trident::testing::tiny_llama()}) {
    SCOPED_TRACE(m.non_standard_gpt_setting().empty() ? "GPT-2" : "Llama");
    GPT model(m, m.padded_vocab());
    model->to(torch::kDouble);
    model->initialize(11);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, m.vocab_size, {2, m.seq_length}, torch::kLong);
    const auto full = model->forward(tokens);
    KvCache cache;
    // A prompt of 3 tokens, then one at a time, then the last two together.
    std::vector<torch::Tensor> pieces = {model->forward_cached(tokens.narrow(1, 0, 3), cache)};
    for (int64_t i = 3; i < m.seq_length - 2; ++i) pieces.push_back(model->forward_cached(tokens.narrow(1, i, 1), cache));
    pieces.push_back(model->forward_cached(tokens.narrow(1, m.seq_length - 2, 2), cache));
    EXPECT_EQ(cache.tokens, m.seq_length);
    EXPECT_EQ(cache.keys[0].sizes(), torch::IntArrayRef({2, m.query_groups(), m.seq_length, m.head_dim()}));
    const auto cached = torch::cat(pieces, 1);
    EXPECT_TRUE(torch::allclose(cached, full, 1e-10, 1e-12)) << (cached - full).abs().max();
    EXPECT_NE(error_of([&] { model->forward_cached(tokens.narrow(1, 0, 1), cache); }).find("would reach position 8, past model.seq_length=8 (positions 0 to 7)"),
              std::string::npos);

    SamplingOptions options;
    options.max_tokens = 2 * m.seq_length;  // beyond the context
    options.temperature = 0;
    const std::vector<int64_t> prompt = {1, 2, 3};
    const auto with_cache = generate_tokens(model, m.vocab_size, prompt, options);
    options.kv_cache = false;
    EXPECT_EQ(generate_tokens(model, m.vocab_size, prompt, options), with_cache);
  }
}
