// The model's layers that tensor parallelism does not split, with their roles: every TP rank
// holds them whole (parallel/parameter_role.h); and the MLP's activation, which the dense MLP
// and the experts share.
#pragma once

#include "core/config.h"
#include "parallel/parameter_role.h"
#include "parallel/tensor_parallel.h"

namespace trident {

// LayerNorm (weight and bias) or RMSNorm (weight only, Zhang and Sennrich 2019) over the last
// dimension. With sequence parallelism each rank normalises its part of the sequence, so its
// gradients are partial sums over the TP group. On CUDA with `fused_kernels`
// (model.fused_kernels), model/fused_kernels.h's kernel, the residual add before it included.
class NormImpl : public ParallelModule {
 public:
  // A norm of the hidden state: whole on every TP rank, its gradient partial with sequence parallelism.
  NormImpl(Normalization kind, int64_t hidden, double epsilon, const TensorParallel& tp, bool fused_kernels = true);
  // A norm over `width` channels whose gradient is partial over TP when `partial_over_tp` (a
  // per-head norm of a rank's heads: model.qk_layernorm).
  NormImpl(Normalization kind, int64_t width, double epsilon, bool partial_over_tp, bool fused_kernels);
  torch::Tensor forward(const torch::Tensor& x);
  // {residual + delta, forward(residual + delta)}: in one pass where the fused kernels apply.
  std::pair<torch::Tensor, torch::Tensor> add_then_forward(const torch::Tensor& residual, const torch::Tensor& delta);
  torch::Tensor weight, bias;  // no bias for RMSNorm

 private:
  Normalization kind_;
  int64_t hidden_;
  double epsilon_;
  bool fused_kernels_;
};
TORCH_MODULE(Norm);

// Learned position embeddings, looked up (and their gradients whole) before any
// sequence-parallel split.
class PositionEmbeddingImpl : public ParallelModule {
 public:
  PositionEmbeddingImpl(int64_t positions, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& positions);
  torch::Tensor weight;  // [positions, hidden]
};
TORCH_MODULE(PositionEmbedding);

// The MLP's activation of its up projection `up`: GELU's tanh approximation (as Megatron uses),
// or with a `gate` projection (SwiGLU) silu(gate) * up. On CUDA with `fused_kernels`
// (model.fused_kernels), model/fused_kernels.h's kernels.
torch::Tensor mlp_activation(const torch::Tensor& gate, const torch::Tensor& up, bool fused_kernels);

}  // namespace trident
