#include "model/gpt.h"

#include <torch/nn/functional/linear.h>
#include <torch/version.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "model/init.h"

namespace trident {
namespace {

LayerNorm layer_norm(const ModelConfig& config, const TensorParallel& tp) {
  return LayerNorm(config.hidden_size, config.layernorm_epsilon, tp);
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

SelfAttentionImpl::SelfAttentionImpl(const ModelConfig& config, const TensorParallel& tp,
                                     Recompute recompute, ContextParallel cp, std::shared_ptr<DropoutStreams> streams)
    : local_heads_(config.num_attention_heads / tp.group->size()),
      head_dim_(config.head_dim()),
      dropout_(config.attention_dropout),
      recompute_core_(recompute == Recompute::selective),
      cp_(std::move(cp)),
      streams_(std::move(streams)) {
  core_ = [this](const std::vector<torch::Tensor>& qkv) {
    // This rank's heads (and tokens): masks of their own on every TP (and CP) rank.
    const double p = is_training() ? dropout_ : 0.0;
    if (cp_.size() > 1) return ring_attention(qkv[0], qkv[1], qkv[2], cp_, p, &streams_->model_parallel);
    if (p == 0) return causal_attention(qkv[0], qkv[1], qkv[2], 0.0);
    return streams_->model_parallel.fork(qkv[0].device(),
                                         [&] { return causal_attention(qkv[0], qkv[1], qkv[2], p); });
  };
  const int64_t h = config.hidden_size;
  qkv = register_module("qkv", ColumnParallelLinear(h, 3 * h, tp));
  out = register_module("out", RowParallelLinear(h, h, tp, Init::residual));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  auto qkv_local = qkv(x);  // [b, s, 3h/t]: the whole sequence, this rank's heads
  const int64_t b = qkv_local.size(0), s = qkv_local.size(1);
  auto heads = qkv_local.view({b, s, local_heads_, 3, head_dim_}).permute({3, 0, 2, 1, 4});
  const std::vector<torch::Tensor> qkv_heads = {heads[0], heads[1], heads[2]};
  auto context = recompute_core_ && is_training() ? recompute(core_, qkv_heads, *streams_) : core_(qkv_heads);
  return out(context.transpose(1, 2).reshape({b, s, local_heads_ * head_dim_}));
}

MLPImpl::MLPImpl(const ModelConfig& config, const TensorParallel& tp) {
  up = register_module("up", ColumnParallelLinear(config.hidden_size, config.ffn(), tp));
  down = register_module("down", RowParallelLinear(config.ffn(), config.hidden_size, tp, Init::residual));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return down(at::gelu(up(x), "tanh"));  // GPT-2's tanh approximation, as Megatron uses
}

// The stream for activations between the layers: split along the sequence over TP ranks with
// sequence parallelism (masks of their own), else whole on each (the same masks).
RandomStream& hidden_stream(DropoutStreams& streams, const TensorParallel& tp) {
  return tp.sequence_parallel ? streams.model_parallel : streams.replicated;
}

BlockImpl::BlockImpl(const ModelConfig& config, const TensorParallel& tp, Recompute recompute,
                     const ContextParallel& cp, std::shared_ptr<DropoutStreams> streams)
    : hidden_dropout_(config.hidden_dropout),
      hidden_stream_(&hidden_stream(*streams, tp)),
      recompute_(recompute == Recompute::full),
      streams_(std::move(streams)) {
  compute_ = [this](const std::vector<torch::Tensor>& x) { return compute(x[0]); };
  ln_1 = register_module("ln_1", layer_norm(config, tp));
  attn = register_module("attn", SelfAttention(config, tp, recompute, cp, streams_));
  ln_2 = register_module("ln_2", layer_norm(config, tp));
  mlp = register_module("mlp", MLP(config, tp));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  return recompute_ && is_training() ? trident::recompute(compute_, {x}, *streams_) : compute(x);
}

torch::Tensor BlockImpl::compute(const torch::Tensor& input) {
  auto x = input + dropout(attn(ln_1(input)), hidden_dropout_, is_training(), *hidden_stream_);
  return x + dropout(mlp(ln_2(x)), hidden_dropout_, is_training(), *hidden_stream_);
}

GPTImpl::GPTImpl(const ModelConfig& config, int64_t vocab, TensorParallel tp, Stage stage,
                 Recompute recompute, ContextParallel cp)
    : config_(config), tp_(std::move(tp)), stage_(stage), cp_(std::move(cp)) {
  TRIDENT_CHECK(config.num_attention_heads % tp_.group->size() == 0, "model.num_attention_heads (",
                config.num_attention_heads, ") must be divisible by the tensor-parallel size ", tp_.group->size());
  if (stage_.num_layers < 0) stage_.num_layers = config.num_layers - stage_.first_layer;
  if (stage_.embedding || stage_.head)
    wte = register_module("wte", VocabParallelEmbedding(vocab, config.hidden_size, tp_, stage_.tied_embedding()));
  if (stage_.embedding) wpe = register_module("wpe", PositionEmbedding(config.seq_length, config.hidden_size));
  for (int64_t i = stage_.first_layer; i < stage_.first_layer + stage_.num_layers; ++i)
    blocks.push_back(register_module("h" + std::to_string(i), Block(config, tp_, recompute, cp_, streams_)));
  if (stage_.head) ln_f = register_module("ln_f", layer_norm(config, tp_));
}

torch::Tensor GPTImpl::forward(const torch::Tensor& input) {
  Communicator& tp = *tp_.group;
  torch::Tensor x = input;
  if (gathered_) gathered_->acquire(rest_unit());
  if (stage_.embedding) {
    auto positions = context_parallel_positions(input.size(1) * cp_.size(), cp_.rank(), cp_.size(), input.options());
    x = wte(input) + wpe(positions);
    if (tp_.sequence_parallel) x = scatter_to_sequence_parallel(x, tp);
    x = dropout(x, config_.hidden_dropout, is_training(), hidden_stream(*streams_, tp_));
  }
  if (gathered_) {
    // Each block gathered for its forward and backward, the next one prefetched.
    const int64_t n = int64_t(blocks.size()), first = stage_.first_layer;
    for (int64_t i = 0; i < n; ++i)
      x = gathered_call(*gathered_, first + i, i + 1 < n ? std::optional(first + i + 1) : std::nullopt,
                        i > 0 ? std::optional(first + i - 1) : std::nullopt,
                        [&](const torch::Tensor& in) { return blocks[size_t(i)](in); }, x);
  } else {
    for (auto& block : blocks) x = block(x);
  }
  if (!stage_.head) return x;
  x = ln_f(x);
  // The head is the vocabulary-parallel embedding again: each rank scores its slice.
  x = tp_.sequence_parallel ? gather_from_sequence_parallel(x, tp) : copy_to_tensor_parallel(x, tp);
  return torch::nn::functional::linear(x, wte->weight);
}

torch::Tensor GPTImpl::loss(const torch::Tensor& input, const torch::Tensor& targets) {
  TRIDENT_CHECK(stage_.head, "loss() needs the stage that holds the head");
  auto logits = forward(input);
  if (logits.scalar_type() != torch::kDouble) logits = logits.to(torch::kFloat);
  return vocab_parallel_cross_entropy(logits.flatten(0, 1), targets.flatten(), *tp_.group).mean();
}

std::vector<int64_t> GPTImpl::parameter_units() const {
  std::map<const c10::TensorImpl*, int64_t> block_unit;
  for (size_t i = 0; i < blocks.size(); ++i)
    for (const auto& p : blocks[i]->parameters()) block_unit[p.unsafeGetTensorImpl()] = stage_.first_layer + int64_t(i);
  std::vector<int64_t> units;
  for (const auto& p : parameters()) {
    auto it = block_unit.find(p.unsafeGetTensorImpl());
    units.push_back(it == block_unit.end() ? rest_unit() : it->second);
  }
  return units;
}

void GPTImpl::initialize(uint64_t seed) {
  const double std = config_.init_method_std;
  initialize_parameters(*this, seed, std, std / std::sqrt(2.0 * double(config_.num_layers)),
                        tp_.group->rank(), tp_.group->size());
  seed_ = seed;
  begin_iteration(0);
}

void GPTImpl::begin_iteration(int64_t iteration) {
  streams_->reseed(seed_, iteration, stage_.first_layer, tp_.group->rank(), cp_.rank());
}

}  // namespace trident
