// Tensor parallelism (Shoeybi et al. 2019) and sequence parallelism (Korthikanti et al. 2022).
//
// Activations are [batch, sequence, hidden]. A tensor-parallel group of t ranks splits linear
// layers by output (column-parallel) or by input (row-parallel); with sequence parallelism the
// activations between them (LayerNorm, dropout, residual) are split along the sequence instead
// of replicated. With a group of one rank every mapping is the identity.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/parameter_role.h"

namespace trident {

// The conjugate mappings (forward / backward):
torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, Communicator& tp);    // id / all-reduce
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, Communicator& tp);  // all-reduce / id
torch::Tensor scatter_to_tensor_parallel(const torch::Tensor& x, Communicator& tp);   // split last dim / all-gather
torch::Tensor gather_from_tensor_parallel(const torch::Tensor& x, Communicator& tp);  // all-gather last dim / split
torch::Tensor scatter_to_sequence_parallel(const torch::Tensor& x, Communicator& tp);  // split seq / all-gather
torch::Tensor gather_from_sequence_parallel(const torch::Tensor& x, Communicator& tp);  // all-gather seq / reduce-scatter
torch::Tensor reduce_scatter_to_sequence_parallel(const torch::Tensor& x, Communicator& tp);  // reduce-scatter seq / all-gather

// A layer's tensor-parallel group, and whether sequence parallelism splits the activations
// between its parallel regions.
struct TensorParallel {
  std::shared_ptr<Communicator> group = make_self_communicator();
  bool sequence_parallel = false;
};

// How a linear layer multiplies: in its weights' type, or in FP8 (precision=fp8:
// parallel/fp8_multiply.h).
enum class LinearMultiply { native, fp8 };

// Where a column-parallel layer's output goes: split over the group (into a row-parallel layer,
// Megatron's pairing) or gathered whole.
enum class ColumnOutput { split, gathered };
// What a row-parallel layer takes: an input already split over the group (a column-parallel
// layer's output) or a whole one, which it splits.
enum class RowInput { split, whole };

// Y = X A^T + b with A's rows (outputs) split over the group: this rank holds rows
// [rank * out/t, (rank+1) * out/t). Input replicated (or sequence-split with sequence
// parallelism: all-gathered first). Roles: weight and bias split on dim 0.
class ColumnParallelLinearImpl : public ParallelModule {
 public:
  ColumnParallelLinearImpl(int64_t in, int64_t out, TensorParallel tp, Init init = Init::normal,
                           ColumnOutput output = ColumnOutput::split, bool with_bias = true);
  torch::Tensor forward(const torch::Tensor& x);
  void multiply_in(LinearMultiply multiply) { multiply_ = multiply; }
  torch::Tensor weight, bias;  // [out/t, in], [out/t] (undefined without bias)

 private:
  friend std::vector<torch::Tensor> column_parallel_sharing_input(const std::vector<ColumnParallelLinearImpl*>& layers,
                                                                  const torch::Tensor& x);
  TensorParallel tp_;
  ColumnOutput output_;
  LinearMultiply multiply_ = LinearMultiply::native;
};
TORCH_MODULE(ColumnParallelLinear);

// Column-parallel layers of one group that take the same input (SwiGLU's gate and up), their
// outputs in order: the input gathered once for all of them (with sequence parallelism one
// all-gather forward and one reduce-scatter of the summed gradients backward, not one each;
// without it one all-reduce backward) and in FP8 cast once. For their weights' gradients they
// keep, with sequence parallelism, the shard and gather it again in backward, once for all of
// them (parallel/sequence_parallel_inputs.h; in FP8, the gathered input's 8-bit copy), else
// the input. Each layer's forward is this with itself alone.
std::vector<torch::Tensor> column_parallel_sharing_input(const std::vector<ColumnParallelLinearImpl*>& layers,
                                                         const torch::Tensor& x);

// Y = X A^T + b with A's columns (inputs) split over the group; the partial products are summed
// (all-reduce, or reduce-scatter along the sequence with sequence parallelism), then the
// replicated bias is added. Roles: weight split on dim 1; bias whole, sequence-parallel with
// sequence parallelism (each rank adds it to its part of the sequence).
class RowParallelLinearImpl : public ParallelModule {
 public:
  RowParallelLinearImpl(int64_t in, int64_t out, TensorParallel tp, Init init = Init::normal,
                        RowInput input = RowInput::split, bool with_bias = true);
  torch::Tensor forward(const torch::Tensor& x);
  void multiply_in(LinearMultiply multiply) { multiply_ = multiply; }
  torch::Tensor weight, bias;  // [out, in/t], [out] (undefined without bias)

 private:
  TensorParallel tp_;
  RowInput input_;
  LinearMultiply multiply_ = LinearMultiply::native;
};
TORCH_MODULE(RowParallelLinear);

// Every column- and row-parallel layer under `root` multiplies so (the embedding and the output
// head are not linear layers: they keep their weights' type).
void set_linear_multiply(torch::nn::Module& root, LinearMultiply multiply);

// An embedding table whose rows (the vocabulary) are split over the group: ids outside this
// rank's range look up zeros, and the all-reduce adds the one rank that had each id. On a
// pipeline, the first stage owns the tied embedding and the last holds a copy for the head.
class VocabParallelEmbeddingImpl : public ParallelModule {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t hidden, TensorParallel tp, Tied tied = Tied::no);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;  // [vocab/t, hidden]

 private:
  TensorParallel tp_;
  int64_t vocab_start_, vocab_end_;
};
TORCH_MODULE(VocabParallelEmbedding);

// Per-token cross-entropy of logits split over the vocabulary ([N, V/t] on each rank) without
// gathering them: three all-reduces (max, sum of exponentials, target logit), in fp32 or fp64.
// Backward: softmax minus one-hot, on each rank's slice.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           Communicator& tp);

}  // namespace trident
