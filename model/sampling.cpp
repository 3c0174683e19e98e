#include "model/sampling.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"

namespace trident {

int64_t choose_token(const torch::Tensor& logits, double temperature, int64_t top_k, at::Generator& generator) {
  TRIDENT_CHECK(logits.dim() == 1 && logits.numel() > 0, "logits of shape ", logits.sizes());
  const auto scores = logits.to(torch::kDouble);
  if (temperature == 0 || top_k == 1) return scores.argmax().item<int64_t>();
  auto probabilities = (scores / temperature).softmax(0);
  if (top_k > 0 && top_k < scores.numel()) {
    const auto kept = std::get<1>(scores.topk(top_k));
    auto mask = torch::zeros_like(probabilities);
    mask.index_fill_(0, kept, 1.0);
    probabilities = probabilities * mask;
  }
  return at::multinomial(probabilities, 1, /*replacement=*/false, generator).item<int64_t>();
}

std::vector<int64_t> generate_tokens(GPT& model, int64_t vocab_size, const std::vector<int64_t>& prompt,
                                     const SamplingOptions& options, const std::function<void(int64_t)>& on_token) {
  if (prompt.empty()) fail("generation needs a prompt of at least one token");
  torch::NoGradGuard no_grad;
  model->eval();
  at::Generator generator = at::detail::createCPUGenerator(options.seed);
  const auto device = model->parameters().front().device();
  const int64_t context = model->config().seq_length;
  // The cache holds tokens[window, window + cache.tokens); each step feeds what it lacks. Once
  // the text outgrows the context the window slides, and the window is run again from scratch.
  KvCache cache;
  int64_t window = 0;
  std::vector<int64_t> tokens = prompt, added;
  while (int64_t(added.size()) < options.max_tokens) {
    const int64_t start = std::max<int64_t>(0, int64_t(tokens.size()) - context);
    if (start != window || !options.kv_cache) {
      cache = KvCache{};
      window = start;
    }
    const auto fed = tokens.begin() + window + cache.tokens;
    const auto ids = torch::tensor(std::vector<int64_t>(fed, tokens.end()), torch::kLong).view({1, -1}).to(device);
    const auto logits = model->forward_cached(ids, cache)[0][-1].narrow(0, 0, vocab_size).cpu();
    const int64_t next = choose_token(logits, options.temperature, options.top_k, generator);
    if (next == options.stop_token) break;
    tokens.push_back(next);
    added.push_back(next);
    if (on_token) on_token(next);
  }
  return added;
}

torch::Tensor score_tokens(GPT& model, int64_t vocab_size, const std::vector<int64_t>& tokens) {
  const int64_t context = model->config().seq_length;
  if (tokens.empty() || int64_t(tokens.size()) > context)
    fail("scoring takes 1 to model.seq_length=", context, " tokens, got ", tokens.size());
  torch::NoGradGuard no_grad;
  model->eval();
  const auto device = model->parameters().front().device();
  const auto ids = torch::tensor(tokens, torch::kLong).view({1, -1}).to(device);
  return model->forward(ids)[0].narrow(1, 0, vocab_size).to(torch::kCPU, torch::kFloat).contiguous();
}

}  // namespace trident
