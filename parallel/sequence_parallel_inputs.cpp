#include "parallel/sequence_parallel_inputs.h"

#include <torch/autograd.h>

#include "core/error.h"
#include "parallel/linear_multiply.h"
#include "parallel/tensor_parallel.h"

namespace trident {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The gathered rows of `shard` [b, s/t, h]: [b s, h].
torch::Tensor gathered_rows(const torch::Tensor& shard, Communicator& tp) {
  return gather_from_sequence_parallel(shard, tp).reshape({-1, shard.size(-1)});
}

// Inputs: the shard, the weights, the biases (an empty list or one each), the group.
struct MultipliesOfGatheredShard : public torch::autograd::Function<MultipliesOfGatheredShard> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& shard, at::TensorList weights,
                               at::TensorList biases, Communicator* tp) {
    const torch::Tensor rows = gathered_rows(shard, *tp);
    variable_list outputs;
    for (size_t i = 0; i < weights.size(); ++i) {
      const torch::Tensor product = multiply_rows(rows, weights[i], biases.empty() ? torch::Tensor() : biases[i]);
      outputs.push_back(product.view({shard.size(0), -1, product.size(-1)}));
    }
    ctx->save_for_backward(weights.vec());
    // The shard itself, not a saved variable: its in-place change is this error, not autograd's.
    ctx->saved_data["shard"] = shard.detach();
    ctx->saved_data["version"] = int64_t(shard._version());
    ctx->saved_data["with_bias"] = !biases.empty();
    ctx->saved_data["tp"] = reinterpret_cast<int64_t>(tp);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list weights = ctx->get_saved_variables();
    TRIDENT_CHECK(ctx->saved_data.count("shard"),
                  "a sequence-parallel multiply's weights' gradients were asked for twice");
    const torch::Tensor shard = ctx->saved_data["shard"].toTensor();
    TRIDENT_CHECK(shard._version() == ctx->saved_data["version"].toInt(),
                  "a column-parallel layer's input was modified in place after its forward; with sequence "
                  "parallelism its backward gathers that input again, so it must stay as it was");
    auto& tp = *reinterpret_cast<Communicator*>(ctx->saved_data["tp"].toInt());
    const bool with_bias = ctx->saved_data["with_bias"].toBool();
    const size_t n = weights.size();
    variable_list out(1 + (with_bias ? 2 : 1) * n + 1);  // the last for the group: none
    bool any_weight = false;
    for (size_t i = 0; i < n; ++i) any_weight |= ctx->needs_input_grad(1 + i);
    const torch::Tensor rows = any_weight ? gathered_rows(shard, tp) : torch::Tensor();
    // The weights' gradients are the shard's last use (saved_data outlives backward otherwise).
    if (any_weight) ctx->saved_data.erase("shard");
    torch::Tensor grad_rows;
    for (size_t i = 0; i < n; ++i) {  // every gradient defined (materialised)
      const torch::Tensor g = grads[i].reshape({-1, weights[i].size(0)});
      if (ctx->needs_input_grad(0))
        grad_rows = grad_rows.defined() ? grad_rows.addmm_(g, weights[i]) : g.mm(weights[i]);
      if (ctx->needs_input_grad(1 + i)) out[1 + i] = weight_gradient(weights[i], g, rows);
      if (with_bias && ctx->needs_input_grad(1 + n + i)) out[1 + n + i] = g.sum(0);
    }
    if (grad_rows.defined())
      out[0] = reduce_scatter_to_sequence_parallel(grad_rows.view({shard.size(0), -1, shard.size(-1)}), tp);
    return out;
  }
};

}  // namespace

std::vector<torch::Tensor> multiply_gathered_shard(const torch::Tensor& shard,
                                                   const std::vector<torch::Tensor>& weights,
                                                   const std::vector<torch::Tensor>& biases, Communicator& tp) {
  TRIDENT_CHECK(biases.empty() || biases.size() == weights.size(), "multiply_gathered_shard: ", weights.size(),
                " weights and ", biases.size(), " biases");
  return MultipliesOfGatheredShard::apply(shard, at::TensorList(weights), at::TensorList(biases), &tp);
}

}  // namespace trident
