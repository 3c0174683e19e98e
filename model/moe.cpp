#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "model/expert_multiply.h"

namespace trident {
namespace {

constexpr const char* kLoadBalancing = "moe_load_balancing";
constexpr const char* kZ = "moe_z";

// The router's precision: at least fp32 (as Megatron-Core's router), fp64 for fp64 models.
torch::Dtype router_dtype(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// Which of the assignments `chosen` [n, k] a capacity of `capacity` per expert keeps: each
// expert's `capacity` most probable ones (`probability` [n, k]; ties to the earlier token), as
// a boolean [n, k].
//
//   sorted by probability, then stably by expert:  [e0: p .9 .7 .2 | e1: p .8 .3]
//   place in the expert's run:                      [     0  1  2  |      0  1 ]   capacity 2:
//   kept:                                           [     1  1  0  |      1  1 ]
torch::Tensor within_capacity(const torch::Tensor& chosen, const torch::Tensor& probability, int64_t experts,
                              int64_t capacity) {
  const torch::Tensor assigned = chosen.reshape({-1});
  const torch::Tensor by_probability =
      std::get<1>(at::sort(probability.reshape({-1}), /*stable=*/true, 0, /*descending=*/true));
  const torch::Tensor order = by_probability.index_select(
      0, std::get<1>(at::sort(assigned.index_select(0, by_probability), /*stable=*/true, 0, false)));
  const torch::Tensor counts = at::bincount(assigned, {}, experts);
  const torch::Tensor run_starts = counts.cumsum(0) - counts;
  const torch::Tensor sorted = assigned.index_select(0, order);
  const torch::Tensor place = torch::arange(assigned.size(0), assigned.options()) - run_starts.index_select(0, sorted);
  return torch::empty_like(assigned, assigned.options().dtype(torch::kBool)).index_put_({order}, place < capacity).view(chosen.sizes());
}

}  // namespace

void declare_moe_losses(const ModelConfig& config) {
  if (config.num_moe_experts == 0) return;
  const std::vector<std::string> declared = declared_auxiliary_losses();
  for (const auto& [name, coefficient] : {std::pair{kLoadBalancing, config.moe_aux_loss_coeff},
                                          std::pair{kZ, config.moe_z_loss_coeff}})
    if (coefficient > 0 && std::find(declared.begin(), declared.end(), name) == declared.end())
      declare_auxiliary_loss(name);
}

MoEImpl::MoEImpl(const BlockContext& context)
    : num_experts_(context.config.num_moe_experts),
      topk_(context.config.moe_router_topk),
      aux_loss_coeff_(context.config.moe_aux_loss_coeff),
      z_loss_coeff_(context.config.moe_z_loss_coeff),
      capacity_factor_(context.config.moe_expert_capacity_factor),
      scaling_factor_(context.config.moe_router_topk_scaling_factor),
      score_function_(context.config.moe_router_score_function),
      pre_softmax_(context.config.moe_router_pre_softmax),
      layer_(context.layer),
      fused_kernels_(context.config.fused_kernels),
      tp_(context.tp),
      cp_(context.cp),
      ep_(context.ep),
      auxiliary_(context.auxiliary),
      load_(context.expert_load),
      bias_(context.expert_bias) {
  const int64_t h = context.config.hidden_size, E = num_experts_, t = tp_.group->size(), ep = ep_.group->size();
  TRIDENT_CHECK(context.config.moe_ffn() % t == 0 && E % ep == 0, E, " experts of ffn ", context.config.moe_ffn(),
                " over ", t, " tensor-parallel and ", ep, " expert-parallel ranks");
  const int64_t f = context.config.moe_ffn() / t, local = E / ep;
  // The router scores this rank's tokens: with sequence parallelism a part of the sequence.
  router = register_parameter("router", torch::empty({E, h}),
                              ParameterRole::whole().partial_over_tp_when(tp_.sequence_parallel));
  if (context.config.activation == Activation::swiglu)
    gate = register_parameter("gate", torch::empty({local, f, h}), ParameterRole::split(1).of_experts());
  up = register_parameter("up", torch::empty({local, f, h}), ParameterRole::split(1).of_experts());
  down = register_parameter("down", torch::empty({local, h, f}),
                            ParameterRole::split(2).of_experts().with_init(Init::residual));
}

MoEImpl::Routed MoEImpl::experts(const torch::Tensor& tokens, const torch::Tensor& chosen,
                                 const torch::Tensor& weights) {
  // Each (token, slot) assignment sorted by expert (stably: tokens in order within an expert),
  // so that an expert's tokens are one run, and the runs of each expert-parallel rank's experts
  // are contiguous. Rows move by permutations only (their gradients too): no index_add, whose
  // atomic adds on a GPU would sum a token's rows in any order.
  //
  //   assignments (token, slot) -> order -> runs [expert 0's | expert 1's | ...] -> dispatched to
  //   the ranks holding the experts -> multiplies -> combined back -> through the inverse
  //   permutation -> [T, k, h] weighted, summed over k
  // Dropped assignments (expert E) sort last and go nowhere; their outputs are zero.
  const int64_t T = tokens.size(0), h = tokens.size(1);
  const torch::Tensor assigned = chosen.reshape({-1});
  const torch::Tensor order = std::get<1>(at::sort(assigned, /*stable=*/true, 0, false));
  const torch::Tensor counts = at::bincount(assigned, {}, num_experts_ + 1);
  // The run lengths on the host (one synchronisation per layer), to cut the runs.
  const ExpertDispatch dispatch(counts.narrow(0, 0, num_experts_), *ep_.group);
  const int64_t kept = dispatch.sent_rows();
  const torch::Tensor runs = dispatch.dispatch(
      tokens.unsqueeze(1).expand({T, topk_, h}).reshape({T * topk_, h}).index_select(0, order).narrow(0, 0, kept));
  const std::vector<int64_t>& local = dispatch.local_counts();
  const torch::Tensor gated = gate.defined() ? expert_multiply(runs, gate, local, fused_kernels_) : torch::Tensor();
  const torch::Tensor activated = mlp_activation(gated, expert_multiply(runs, up, local, fused_kernels_), fused_kernels_);
  torch::Tensor combined = dispatch.combine(expert_multiply(activated, down, local, fused_kernels_));
  if (kept < T * topk_) combined = torch::cat({combined, torch::zeros({T * topk_ - kept, h}, combined.options())});
  const torch::Tensor by_assignment = combined.index_select(0, at::argsort(order)).view({T, topk_, h});
  return {(by_assignment * weights.unsqueeze(2).to(tokens.scalar_type())).sum(1), counts[num_experts_]};
}

torch::Tensor MoEImpl::with_losses(const torch::Tensor& output, const torch::Tensor& logits, torch::Tensor routed) {
  if (!torch::GradMode::is_enabled() || (aux_loss_coeff_ == 0 && z_loss_coeff_ == 0)) return output;
  // The micro-batch's tokens are spread over the sequence-parallel ranks and the
  // context-parallel ones. Over the first, a sum is all-reduced and each rank's gradient is its
  // own tokens' (summed over TP with the router's). Over the second, the sum's gradient goes
  // back to every rank, c times each rank's share, which the average of data- and
  // context-parallel gradients divides by c again.
  Communicator& tp = *tp_.group;
  Communicator& cp = *cp_.group;
  const double sequence_parts = double(tp_.sequence_parallel ? tp.size() : 1);
  auto over_the_micro_batch = [&](torch::Tensor sum) {
    if (tp_.sequence_parallel) sum = reduce_from_tensor_parallel(sum, tp);
    if (cp.size() > 1) sum = reduce_from_tensor_parallel(copy_to_tensor_parallel(sum, cp), cp);
    return sum;
  };
  torch::Tensor out = output;
  if (aux_loss_coeff_ > 0) {
    const torch::Tensor probability_sums = over_the_micro_batch(probabilities(logits).sum(0));
    // `routed` counts the tokens of every sequence-parallel rank already (the experts see them all).
    routed = routed.to(logits.scalar_type());
    if (cp.size() > 1) cp.all_reduce(routed, ReduceOp::sum);
    const double tokens = double(logits.size(0)) * sequence_parts * double(cp.size());
    const torch::Tensor balance =
        (probability_sums * routed).sum() * (double(num_experts_) / (double(topk_) * tokens * tokens));
    out = auxiliary_->add(out, kLoadBalancing, balance, aux_loss_coeff_);
  }
  if (z_loss_coeff_ > 0) {
    // A mean over the tokens: the context-parallel ranks' means average as the token loss's do.
    torch::Tensor z = logits.logsumexp(-1).square().sum().reshape({1});
    if (tp_.sequence_parallel) z = reduce_from_tensor_parallel(z, tp);
    out = auxiliary_->add(out, kZ, z.reshape({}) / (double(logits.size(0)) * sequence_parts), z_loss_coeff_);
  }
  return out;
}

torch::Tensor MoEImpl::forward(const torch::Tensor& x) {
  Communicator& tp = *tp_.group;
  const int64_t b = x.size(0), n = x.size(1), h = x.size(2);
  const torch::Tensor logits = at::matmul(x.reshape({-1, h}).to(router_dtype(x)), router.to(router_dtype(x)).t());
  const auto [chosen, weights] = route(logits);
  // The experts see the tokens of the whole sequence on every tensor-parallel rank.
  torch::Tensor tokens, routed_to, routed_weights;
  if (tp_.sequence_parallel) {
    tokens = gather_from_sequence_parallel(x, tp);
    routed_weights = gather_from_sequence_parallel(weights.view({b, n, topk_}), tp);
    routed_to = gather_from_sequence_parallel(chosen.view({b, n, topk_}), tp);  // integers: no gradient
  } else {
    tokens = copy_to_tensor_parallel(x, tp);
    routed_weights = copy_to_tensor_parallel(weights, tp);
    routed_to = chosen;
  }
  routed_to = routed_to.reshape({-1, topk_});
  const torch::Tensor counts = at::bincount(routed_to.reshape({-1}), {}, num_experts_);
  if (capacity_factor_ > 0) {
    const torch::Tensor probability = probabilities(logits).gather(-1, chosen).detach();
    const torch::Tensor routed_probability = tp_.sequence_parallel
                                                 ? gather_from_sequence_parallel(probability.view({b, n, topk_}), tp)
                                                 : probability;
    routed_to = routed_to.masked_fill(
        kept_assignments(routed_to, routed_probability.reshape({-1, topk_})).logical_not(), num_experts_);
  }
  const Routed routed = experts(tokens.reshape({-1, h}), routed_to, routed_weights.reshape({-1, topk_}));
  if (load_ && torch::GradMode::is_enabled()) load_->record(layer_, counts, routed.dropped);
  const torch::Tensor partial = routed.output.view(tokens.sizes());
  const torch::Tensor out = tp_.sequence_parallel ? reduce_scatter_to_sequence_parallel(partial, tp)
                                                  : reduce_from_tensor_parallel(partial, tp);
  return with_losses(out, logits, counts);
}

torch::Tensor MoEImpl::probabilities(const torch::Tensor& logits) const {
  if (score_function_ == RouterScore::softmax) return logits.softmax(-1);
  const torch::Tensor scores = logits.sigmoid();
  return scores / scores.sum(-1, /*keepdim=*/true);
}

std::pair<torch::Tensor, torch::Tensor> MoEImpl::route(const torch::Tensor& logits) {
  const bool sigmoid = score_function_ == RouterScore::sigmoid;
  const torch::Tensor scores = sigmoid ? logits.sigmoid() : logits;
  // The bias steers the choice only (DeepSeek-V3): the weights come from the scores themselves.
  const torch::Tensor chosen =
      std::get<1>((bias_ ? scores + bias_->of_layer(layer_, scores.device()).to(scores.scalar_type()) : scores)
                      .topk(topk_, -1));
  const torch::Tensor picked = scores.gather(-1, chosen);
  torch::Tensor weights = sigmoid        ? (topk_ > 1 ? picked / picked.sum(-1, true) : picked)
                          : pre_softmax_ ? logits.softmax(-1).gather(-1, chosen)
                                         : picked.softmax(-1);
  if (scaling_factor_ > 0) weights = weights * scaling_factor_;
  return {chosen, weights};
}

torch::Tensor MoEImpl::kept_assignments(const torch::Tensor& chosen, const torch::Tensor& probability) {
  // Over the micro-batch's tokens, which the context-parallel ranks share: each rank's choices
  // gathered, kept or dropped together, this rank's part taken back.
  Communicator& cp = *cp_.group;
  torch::Tensor all_chosen = chosen, all_probability = probability;
  if (cp.size() > 1) {
    all_chosen = torch::empty({chosen.size(0) * cp.size(), topk_}, chosen.options());
    all_probability = torch::empty({chosen.size(0) * cp.size(), topk_}, probability.options());
    cp.all_gather(all_chosen, chosen.contiguous());
    cp.all_gather(all_probability, probability.contiguous());
  }
  const int64_t capacity = int64_t(std::ceil(capacity_factor_ * double(all_chosen.numel()) / double(num_experts_)));
  return within_capacity(all_chosen, all_probability, num_experts_, capacity)
      .narrow(0, chosen.size(0) * cp.rank(), chosen.size(0));
}

}  // namespace trident
