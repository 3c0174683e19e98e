#include "model/layers.h"

namespace trident {

LayerNormImpl::LayerNormImpl(int64_t hidden, double epsilon, const TensorParallel& tp)
    : hidden_(hidden), epsilon_(epsilon) {
  const auto role = ParameterRole::whole().without_decay().sequence_parallel_when(tp.sequence_parallel);
  weight = register_parameter("weight", torch::empty({hidden}), role.with_init(Init::ones));
  bias = register_parameter("bias", torch::empty({hidden}), role.with_init(Init::zeros));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  return at::layer_norm(x, {hidden_}, weight, bias, epsilon_);
}

PositionEmbeddingImpl::PositionEmbeddingImpl(int64_t positions, int64_t hidden) {
  weight = register_parameter("weight", torch::empty({positions, hidden}), ParameterRole::whole());
}

torch::Tensor PositionEmbeddingImpl::forward(const torch::Tensor& positions) {
  return torch::embedding(weight, positions);
}

}  // namespace trident
