#include "model/gpt.h"

#include <torch/version.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "model/fused_kernels.h"
#include "model/init.h"
#include "parallel/context_attention.h"
#include "parallel/linear_multiply.h"

namespace trident {
namespace {

Norm norm(const ModelConfig& config, const TensorParallel& tp) {
  return Norm(config.normalization, config.hidden_size, config.layernorm_epsilon, tp, config.fused_kernels);
}

// Causal attention of queries [b, heads, n, d] at the last n of the keys' positions over keys and
// values [b, groups, total, d], each group shared by heads / groups consecutive query heads:
// query i, at position total - n + i, sees the keys up to it (n = total in training; fewer after
// a KV cache), and with `documents` ([b, n] ids, n = total) only those of its own document.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& grouped_k, const torch::Tensor& grouped_v,
                               double dropout, const torch::Tensor& documents = {}) {
  const int64_t per_group = q.size(1) / grouped_k.size(1), n = q.size(2), total = grouped_k.size(2);
  const auto k = repeat_for_query_heads(grouped_k, per_group), v = repeat_for_query_heads(grouped_v, per_group);
  torch::Tensor visible;  // [n, total] or [b, 1, n, n]; undefined: the plain causal mask of n = total
  if (n != total || documents.defined())
    visible = torch::ones({n, total}, q.options().dtype(torch::kBool)).tril(total - n);
  if (documents.defined()) {
    TRIDENT_CHECK(n == total && documents.sizes() == torch::IntArrayRef({q.size(0), n}), "documents ",
                  documents.sizes(), " for queries ", q.sizes(), " over ", total, " keys");
    visible = visible.logical_and(documents.unsqueeze(2).eq(documents.unsqueeze(1))).unsqueeze(1);
  }
#if TORCH_VERSION_MAJOR >= 2
  if (!visible.defined()) return at::scaled_dot_product_attention(q, k, v, {}, dropout, /*is_causal=*/true);
  return at::scaled_dot_product_attention(q, k, v, visible, dropout, /*is_causal=*/false);
#else
  // LibTorch 1.x has no fused kernel: the textbook softmax(QK^T / sqrt(d)) V.
  auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  const auto hidden = visible.defined() ? visible.logical_not()
                                        : torch::ones({n, total}, q.options().dtype(torch::kBool)).triu(1);
  auto probs = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity()).softmax(-1);
  if (dropout > 0) probs = at::dropout(probs, dropout, /*train=*/true);
  return at::matmul(probs, v);
#endif
}

}  // namespace

SelfAttentionImpl::SelfAttentionImpl(const ModelConfig& config, const TensorParallel& tp,
                                     Recompute recompute, ContextParallel cp, std::shared_ptr<DropoutStreams> streams)
    : local_groups_(config.query_groups() / tp.group->size()),
      heads_per_group_(config.num_attention_heads / config.query_groups()),
      head_dim_(config.head_dim()),
      fused_kernels_(config.fused_kernels),
      dropout_(config.attention_dropout),
      recompute_core_(recompute == Recompute::selective),
      cp_(std::move(cp)),
      streams_(std::move(streams)) {
  core_ = [this](const std::vector<torch::Tensor>& qkv) {
    // This rank's heads (and tokens): masks of their own on every TP (and CP) rank. A fourth
    // tensor is the documents' ids over the whole sequence.
    const double p = is_training() ? dropout_ : 0.0;
    const torch::Tensor documents = qkv.size() > 3 ? qkv[3] : torch::Tensor();
    const LocalAttention attend = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
      if (p == 0) return causal_attention(q, k, v, 0.0, documents);
      return streams_->model_parallel.fork(q.device(), [&] { return causal_attention(q, k, v, p, documents); });
    };
    return context_attention(qkv[0], qkv[1], qkv[2], cp_, attend, p, &streams_->model_parallel, documents);
  };
  if (config.position_embedding_type == PositionEmbeddingType::rope) rotary_.emplace(config);
  const int64_t h = config.hidden_size;
  const bool bias = config.add_bias_linear;
  qkv = register_module("qkv", ColumnParallelLinear(h, config.qkv_rows(), tp, Init::normal, ColumnOutput::split, bias));
  out = register_module("out", RowParallelLinear(config.attention_width(), h, tp, Init::residual, RowInput::split, bias));
  if (config.qk_layernorm) {
    // Each TP rank normalises its own heads: the weights' gradients are partial sums over TP.
    const auto head_norm = [&] {
      return Norm(config.normalization, head_dim_, config.layernorm_epsilon, tp.group->size() > 1, config.fused_kernels);
    };
    q_norm = register_module("q_norm", head_norm());
    k_norm = register_module("k_norm", head_norm());
  }
}

SelfAttentionImpl::Heads SelfAttentionImpl::project(const torch::Tensor& x, const torch::Tensor& positions) {
  auto qkv_local = qkv(x);  // [b, s, (a + 2g) d / t]: the whole sequence, this rank's groups
  const int64_t b = qkv_local.size(0), s = qkv_local.size(1), per_group = heads_per_group_;
  const auto groups = qkv_local.view({b, s, local_groups_, per_group + 2, head_dim_});
  // [b, heads or groups, s, d]; with a group per head, views of qkv_local. One split rather than
  // a narrow and two selects: its backward writes the three gradients into one tensor in a pass,
  // where the selects' would each fill a zero tensor of qkv_local's size, copy into it, and add.
  const auto parts = groups.split_with_sizes({per_group, 1, 1}, 3);
  Heads heads{parts[0].flatten(2, 3).transpose(1, 2), parts[1].squeeze(3).transpose(1, 2),
              parts[2].squeeze(3).transpose(1, 2)};
  if (q_norm) {
    heads.q = q_norm(heads.q);
    heads.k = k_norm(heads.k);
  }
  if (rotary_) {
    // Training: the tokens' places in the whole sequence, this rank's context-parallel chunks of it.
    const auto at = positions.defined() ? positions
                                        : context_parallel_positions(s * cp_.size(), cp_.rank(), cp_.size(),
                                                                     qkv_local.options().dtype(torch::kLong));
    const auto tables = rotary_->tables(at, qkv_local.scalar_type());
    heads.q = Rotary::rotate(heads.q, tables, fused_kernels_);
    heads.k = Rotary::rotate(heads.k, tables, fused_kernels_);
  }
  return heads;
}

torch::Tensor SelfAttentionImpl::output(const torch::Tensor& context) {
  return out(context.transpose(1, 2).flatten(2, 3));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const Documents& documents) {
  const Heads h = project(x, documents.positions);
  std::vector<torch::Tensor> qkv_heads = {h.q, h.k, h.v};
  if (documents.ids.defined()) qkv_heads.push_back(documents.ids);
  return output(recompute_core_ && is_training() ? recompute(core_, qkv_heads, *streams_) : core_(qkv_heads));
}

torch::Tensor SelfAttentionImpl::forward_cached(const torch::Tensor& x, const torch::Tensor& positions,
                                                torch::Tensor& keys, torch::Tensor& values) {
  const Heads h = project(x, positions);
  const bool first = !keys.defined();
  keys = first ? h.k : torch::cat({keys, h.k}, 2);
  values = first ? h.v : torch::cat({values, h.v}, 2);
  return output(causal_attention(h.q, keys, values, 0.0));
}

MLPImpl::MLPImpl(const ModelConfig& config, const TensorParallel& tp, int64_t f) : fused_kernels_(config.fused_kernels) {
  const int64_t h = config.hidden_size;
  const bool bias = config.add_bias_linear;
  if (config.activation == Activation::swiglu)
    gate = register_module("gate", ColumnParallelLinear(h, f, tp, Init::normal, ColumnOutput::split, bias));
  up = register_module("up", ColumnParallelLinear(h, f, tp, Init::normal, ColumnOutput::split, bias));
  down = register_module("down", RowParallelLinear(f, h, tp, Init::residual, RowInput::split, bias));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  if (!gate) return down(mlp_activation(torch::Tensor(), up(x), fused_kernels_));
  const auto gate_and_up = column_parallel_sharing_input({gate.get(), up.get()}, x);
  return down(mlp_activation(gate_and_up[0], gate_and_up[1], fused_kernels_));
}

BlockImpl::BlockImpl(const BlockContext& context)
    : TransformerBlock(context),
      hidden_dropout_(context.config.hidden_dropout),
      hidden_stream_(&hidden_stream(*streams_, context.tp)) {
  ln_1 = register_module("ln_1", norm(context.config, context.tp));
  attn = register_module("attn", SelfAttention(context.config, context.tp, context.recompute, context.cp, streams_));
  ln_2 = register_module("ln_2", norm(context.config, context.tp));
  if (context.config.moe_layer(context.layer)) {
    moe = register_module("moe", MoE(context));
    if (const int64_t shared = context.config.moe_shared_expert_intermediate_size; shared > 0)
      shared_expert = register_module("shared_expert", MLP(context.config, context.tp, shared));
  } else
    mlp = register_module("mlp", MLP(context.config, context.tp, context.config.ffn()));
}

torch::Tensor BlockImpl::feed_forward(const torch::Tensor& x) {
  if (!moe) return mlp(x);
  return shared_expert ? moe(x) + shared_expert(x) : moe(x);
}

torch::Tensor BlockImpl::forward_cached(const torch::Tensor& input, const torch::Tensor& positions,
                                        torch::Tensor& keys, torch::Tensor& values) {
  TRIDENT_CHECK(!is_training(), "a cached forward is for inference, in eval mode (no dropout)");
  auto x = input + attn->forward_cached(ln_1(input), positions, keys, values);
  return x + feed_forward(ln_2(x));
}

torch::Tensor BlockImpl::compute(const torch::Tensor& input, const Documents& documents) {
  const auto [x, normed] =
      ln_2->add_then_forward(input, dropout(attn(ln_1(input), documents), hidden_dropout_, is_training(), *hidden_stream_));
  return x + dropout(feed_forward(normed), hidden_dropout_, is_training(), *hidden_stream_);
}

GPTImpl::GPTImpl(const ModelConfig& config, int64_t vocab, TensorParallel tp, Stage stage,
                 Recompute recompute, ContextParallel cp, ExpertParallel ep)
    : config_(config), tp_(std::move(tp)), stage_(stage), cp_(std::move(cp)), ep_(std::move(ep)) {
  TRIDENT_CHECK(config.query_groups() % tp_.group->size() == 0, "model.num_query_groups (", config.query_groups(),
                ") must be divisible by the tensor-parallel size ", tp_.group->size());
  if (stage_.num_layers < 0) stage_.num_layers = config.num_layers - stage_.first_layer;
  const int64_t h = config.hidden_size;
  const bool tied = !config.untie_embeddings_and_output_weights;
  if (stage_.embedding || (stage_.head && tied))
    wte = register_module("wte", VocabParallelEmbedding(vocab, h, tp_, tied ? stage_.tied_embedding() : Tied::no));
  if (stage_.embedding && config.position_embedding_type == PositionEmbeddingType::learned)
    wpe = register_module("wpe", PositionEmbedding(config.seq_length, h));
  declare_moe_losses(config_);  // on every stage, whichever layers it holds: the log's values agree
  if (config.num_moe_experts > 0)
    expert_load_ = std::make_shared<ExpertLoad>(config.num_layers, config.num_moe_experts);
  if (config.moe_router_enable_expert_bias)
    expert_bias_ = std::make_shared<ExpertBias>(config.num_layers, config.num_moe_experts,
                                                config.moe_router_bias_update_rate);
  for (int64_t i = stage_.first_layer; i < stage_.first_layer + stage_.num_layers; ++i)
    blocks.push_back(register_module("h" + std::to_string(i), make_block({config_, tp_, recompute, cp_, streams_, i, auxiliary_, ep_, expert_load_, expert_bias_})));
  if (stage_.head) ln_f = register_module("ln_f", norm(config, tp_));
  if (stage_.head && !tied) lm_head = register_module("lm_head", VocabParallelEmbedding(vocab, h, tp_));
}

torch::Tensor GPTImpl::forward(const torch::Tensor& input, const Documents& documents) {
  Communicator& tp = *tp_.group;
  torch::Tensor x = input;
  if (gathered_) gathered_->acquire(rest_unit());
  if (stage_.embedding) {
    x = wte(input);
    if (wpe)
      x = x + wpe(documents.positions.defined()
                      ? documents.positions
                      : context_parallel_positions(input.size(1) * cp_.size(), cp_.rank(), cp_.size(), input.options()));
    if (tp_.sequence_parallel) x = scatter_to_sequence_parallel(x, tp);
    x = dropout(x, config_.hidden_dropout, is_training(), hidden_stream(*streams_, tp_));
  }
  if (gathered_) {
    // Each block gathered for its forward and backward, the next one prefetched.
    const int64_t n = int64_t(blocks.size()), first = stage_.first_layer;
    for (int64_t i = 0; i < n; ++i)
      x = gathered_call(*gathered_, first + i, i + 1 < n ? std::optional(first + i + 1) : std::nullopt,
                        i > 0 ? std::optional(first + i - 1) : std::nullopt,
                        [&](const torch::Tensor& in) { return blocks[size_t(i)]->forward(in, documents); }, x);
  } else {
    for (auto& block : blocks) x = block->forward(x, documents);
  }
  if (!stage_.head) return x;
  x = ln_f(x);
  // The head is vocabulary-parallel (the embedding again when tied): each rank scores its slice.
  x = tp_.sequence_parallel ? gather_from_sequence_parallel(x, tp) : copy_to_tensor_parallel(x, tp);
  return linear_over_rows(x, head_weight());
}

torch::Tensor GPTImpl::forward_cached(const torch::Tensor& input, KvCache& cache) {
  TRIDENT_CHECK(tp_.group->size() == 1 && cp_.size() == 1 && ep_.group->size() == 1 && stage_.embedding &&
                    stage_.head && !gathered_,
                "a cached forward runs a whole model in one process");
  const int64_t n = input.size(1);
  if (cache.tokens + n > config_.seq_length)
    fail("a cached forward of ", n, " tokens after ", cache.tokens, " would reach position ", cache.tokens + n - 1,
         ", past model.seq_length=", config_.seq_length, " (positions 0 to ", config_.seq_length - 1, ")");
  const auto positions = torch::arange(cache.tokens, cache.tokens + n, input.options());
  cache.keys.resize(blocks.size());
  cache.values.resize(blocks.size());
  auto x = wte(input);
  if (wpe) x = x + wpe(positions);
  for (size_t i = 0; i < blocks.size(); ++i) x = blocks[i]->forward_cached(x, positions, cache.keys[i], cache.values[i]);
  cache.tokens += n;
  return linear_over_rows(ln_f(x), head_weight());
}

torch::Tensor GPTImpl::loss(const torch::Tensor& input, const torch::Tensor& targets, const Documents& documents,
                            const torch::Tensor& loss_mask, const TokenLoss& token_loss) {
  TRIDENT_CHECK(stage_.head, "loss() needs the stage that holds the head");
  auto logits = forward(input, documents);
  const torch::Tensor mask = loss_mask.defined() ? loss_mask.flatten() : loss_mask;  // [N] or none
  torch::Tensor losses;
  if (!token_loss && tp_.group->size() == 1 && fused::applies(logits, config_.fused_kernels)) {
    // From the logits in their own type: no fp32 copy of them (model/fused_kernels.h).
    losses = fused::cross_entropy(logits.flatten(0, 1), targets.flatten());
  } else {
    if (logits.scalar_type() != torch::kDouble) logits = logits.to(torch::kFloat);
    losses = token_loss ? token_loss({logits.flatten(0, 1), targets.flatten(), mask, is_training(), *tp_.group})
                        : vocab_parallel_cross_entropy(logits.flatten(0, 1), targets.flatten(), *tp_.group);
  }
  if (mask.defined()) losses = losses * mask.to(losses.scalar_type());
  return losses.mean();
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
                        {tp_.group->rank(), tp_.group->size()}, {ep_.group->rank(), ep_.group->size()});
  seed_ = seed;
  begin_iteration(0);
}

void GPTImpl::begin_iteration(int64_t iteration) {
  streams_->reseed(seed_, iteration, stage_.first_slot(), tp_.group->rank(), cp_.rank());
}

}  // namespace trident
