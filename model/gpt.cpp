#include "model/gpt.h"

#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/loss.h>
#include <torch/version.h>

#include <cmath>

#include "model/init.h"

namespace trident {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::nn::LayerNorm layer_norm(const ModelConfig& config) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({config.hidden_size}).eps(config.layernorm_epsilon));
}

// Causal attention over [b, heads, s, d].
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double dropout) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, dropout, /*is_causal=*/true);
#else
  // LibTorch 1.x has no fused kernel: the textbook softmax(QK^T / sqrt(d)) V.
  const int64_t s = q.size(2);
  auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  auto future = torch::ones({s, s}, q.options().dtype(torch::kBool)).triu(1);
  auto probs = scores.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1);
  if (dropout > 0) probs = at::dropout(probs, dropout, /*train=*/true);
  return at::matmul(probs, v);
#endif
}

}  // namespace

SelfAttentionImpl::SelfAttentionImpl(const ModelConfig& config)
    : heads_(config.num_attention_heads),
      head_dim_(config.head_dim()),
      dropout_(config.attention_dropout) {
  qkv = register_module("qkv", torch::nn::Linear(config.hidden_size, 3 * config.hidden_size));
  out = register_module("out", torch::nn::Linear(config.hidden_size, config.hidden_size));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), s = x.size(1);
  auto qkv_heads = qkv(x).view({b, s, heads_, 3, head_dim_}).permute({3, 0, 2, 1, 4});
  auto context = causal_attention(qkv_heads[0], qkv_heads[1], qkv_heads[2],
                                  is_training() ? dropout_ : 0.0);
  return out(context.transpose(1, 2).reshape({b, s, heads_ * head_dim_}));
}

MLPImpl::MLPImpl(const ModelConfig& config) {
  up = register_module("up", torch::nn::Linear(config.hidden_size, config.ffn()));
  down = register_module("down", torch::nn::Linear(config.ffn(), config.hidden_size));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return down(at::gelu(up(x), "tanh"));  // GPT-2's tanh approximation, as Megatron uses
}

BlockImpl::BlockImpl(const ModelConfig& config) {
  ln_1 = register_module("ln_1", layer_norm(config));
  attn = register_module("attn", SelfAttention(config));
  ln_2 = register_module("ln_2", layer_norm(config));
  mlp = register_module("mlp", MLP(config));
  dropout = register_module("dropout", torch::nn::Dropout(config.hidden_dropout));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + dropout(attn(ln_1(x)));
  return x + dropout(mlp(ln_2(x)));
}

GPTImpl::GPTImpl(const ModelConfig& config, int64_t vocab) : config_(config) {
  wte = register_module("wte", torch::nn::Embedding(vocab, config.hidden_size));
  wpe = register_module("wpe", torch::nn::Embedding(config.seq_length, config.hidden_size));
  dropout = register_module("dropout", torch::nn::Dropout(config.hidden_dropout));
  for (int64_t i = 0; i < config.num_layers; ++i)
    blocks.push_back(register_module("h" + std::to_string(i), Block(config)));
  ln_f = register_module("ln_f", layer_norm(config));
}

torch::Tensor GPTImpl::forward(const torch::Tensor& tokens) {
  auto positions = torch::arange(tokens.size(1), tokens.options());
  auto x = dropout(wte(tokens) + wpe(positions));
  for (auto& block : blocks) x = block(x);
  return torch::nn::functional::linear(ln_f(x), wte->weight);
}

torch::Tensor GPTImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  auto logits = forward(tokens);
  if (logits.scalar_type() != torch::kDouble) logits = logits.to(torch::kFloat);
  return torch::nn::functional::cross_entropy(logits.flatten(0, 1), targets.flatten());
}

void GPTImpl::initialize(uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double std = config_.init_method_std;
  const double residual_std = std / std::sqrt(2.0 * double(config_.num_layers));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (ends_with(name, ".bias")) {
      p.zero_();
    } else if (name.find("ln_") != std::string::npos) {
      p.fill_(1.0);
    } else {
      bool residual = ends_with(name, "attn.out.weight") || ends_with(name, "mlp.down.weight");
      p.copy_(init_normal(name, p.sizes(), residual ? residual_std : std, seed));
    }
  }
}

}  // namespace trident
