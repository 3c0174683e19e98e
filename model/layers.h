// The model's layers that tensor parallelism does not split, with their roles: every TP rank
// holds them whole (parallel/parameter_role.h).
#pragma once

#include "parallel/parameter_role.h"
#include "parallel/tensor_parallel.h"

namespace trident {

// LayerNorm over the last dimension. With sequence parallelism each rank normalises its part of
// the sequence, so its gradients are partial sums over the TP group.
class LayerNormImpl : public ParallelModule {
 public:
  LayerNormImpl(int64_t hidden, double epsilon, const TensorParallel& tp);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  int64_t hidden_;
  double epsilon_;
};
TORCH_MODULE(LayerNorm);

// Learned position embeddings, looked up (and their gradients whole) before any
// sequence-parallel split.
class PositionEmbeddingImpl : public ParallelModule {
 public:
  PositionEmbeddingImpl(int64_t positions, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& positions);
  torch::Tensor weight;  // [positions, hidden]
};
TORCH_MODULE(PositionEmbedding);

}  // namespace trident
