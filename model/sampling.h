// Text generation from a whole model in one process: the next token drawn from the last
// position's logits, again and again. A KV cache (model/gpt.h) keeps every layer's keys and
// values, so that each new token is one forward of one position; once the text is longer than
// model.seq_length, each token re-runs the model over the latest model.seq_length tokens.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"

namespace trident {

struct SamplingOptions {
  int64_t max_tokens = 100;
  double temperature = 1.0;  // 0: always the most likely token
  int64_t top_k = 0;         // draw among the k most likely only; 0: among all
  uint64_t seed = 1234;
  int64_t stop_token = -1;   // ends the text when drawn (not returned); -1: none
  bool kv_cache = true;      // false: every token re-runs the model over its whole context
};

// The next token from logits [vocab]: the arg max at temperature 0 (or top_k 1), else a draw
// from softmax(logits / temperature) restricted to the top_k largest.
int64_t choose_token(const torch::Tensor& logits, double temperature, int64_t top_k, at::Generator& generator);

// Continues `prompt` (at least one id) with up to options.max_tokens tokens from `model`, a
// GPT holding every layer and the head; the logits of ids >= vocab_size (the padding) are
// ignored. `on_token` sees each token as it is drawn.
std::vector<int64_t> generate_tokens(GPT& model, int64_t vocab_size, const std::vector<int64_t>& prompt,
                                     const SamplingOptions& options,
                                     const std::function<void(int64_t)>& on_token = {});

// The logits [n, vocab_size] (fp32, on the CPU) `model` gives at each position of `tokens`
// (1 <= n <= model.seq_length): what another implementation of the same weights must give too.
torch::Tensor score_tokens(GPT& model, int64_t vocab_size, const std::vector<int64_t>& tokens);

}  // namespace trident
