#include "model/layers.h"

namespace trident {

NormImpl::NormImpl(Normalization kind, int64_t hidden, double epsilon, const TensorParallel& tp)
    : kind_(kind), hidden_(hidden), epsilon_(epsilon) {
  const auto role = ParameterRole::whole().without_decay().sequence_parallel_when(tp.sequence_parallel);
  weight = register_parameter("weight", torch::empty({hidden}), role.with_init(Init::ones));
  if (kind_ == Normalization::layernorm)
    bias = register_parameter("bias", torch::empty({hidden}), role.with_init(Init::zeros));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (kind_ == Normalization::layernorm) return at::layer_norm(x, {hidden_}, weight, bias, epsilon_);
  // x / rms(x) in at least fp32, then scaled in x's dtype (as Hugging Face's LlamaRMSNorm).
  const auto wide = x.scalar_type() == torch::kDouble ? x : x.to(torch::kFloat);
  const auto normed = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + epsilon_);
  return weight * normed.to(x.scalar_type());
}

PositionEmbeddingImpl::PositionEmbeddingImpl(int64_t positions, int64_t hidden) {
  weight = register_parameter("weight", torch::empty({positions, hidden}), ParameterRole::whole());
}

torch::Tensor PositionEmbeddingImpl::forward(const torch::Tensor& positions) {
  return torch::embedding(weight, positions);
}

}  // namespace trident
