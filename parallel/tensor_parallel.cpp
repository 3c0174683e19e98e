#include "parallel/tensor_parallel.h"

#include <torch/autograd.h>

#include "core/error.h"
#include "parallel/fp8_multiply.h"
#include "parallel/linear_multiply.h"
#include "parallel/sequence_parallel_inputs.h"

namespace trident {
namespace {

constexpr int64_t kSequenceDim = 1;

// What a mapping does in one direction.
enum class Op { identity, all_reduce, split_last, gather_last, split_sequence, gather_sequence,
                reduce_scatter_sequence };

torch::Tensor split(const torch::Tensor& x, int64_t dim, Communicator& tp) {
  TRIDENT_CHECK(x.size(dim) % tp.size() == 0, "tensor parallelism: dimension ", dim, " of size ", x.size(dim),
                " does not split into ", tp.size(), " parts");
  return x.chunk(tp.size(), dim)[size_t(tp.rank())].contiguous();
}

torch::Tensor gather(const torch::Tensor& x, int64_t dim, Communicator& tp) {
  auto parts = torch::empty({tp.size(), x.numel()}, x.options());
  auto flat = parts.view(-1);
  tp.all_gather(flat, x.contiguous().view(-1));
  std::vector<torch::Tensor> pieces;
  for (int r = 0; r < tp.size(); ++r) pieces.push_back(parts[r].view(x.sizes()));
  return torch::cat(pieces, dim);
}

torch::Tensor reduce_scatter(const torch::Tensor& x, int64_t dim, Communicator& tp) {
  auto chunks = x.chunk(tp.size(), dim);
  auto stacked = torch::stack(chunks, 0).contiguous();
  auto out = torch::empty(chunks[0].sizes(), x.options());
  tp.reduce_scatter(out, stacked, ReduceOp::sum);
  return out;
}

torch::Tensor apply(Op op, const torch::Tensor& x, Communicator& tp) {
  const int64_t last = x.dim() - 1;
  switch (op) {
    case Op::identity: return x;
    case Op::all_reduce: {
      auto out = x.contiguous().clone();
      tp.all_reduce(out, ReduceOp::sum);
      return out;
    }
    case Op::split_last: return split(x, last, tp);
    case Op::gather_last: return gather(x, last, tp);
    case Op::split_sequence: return split(x, kSequenceDim, tp);
    case Op::gather_sequence: return gather(x, kSequenceDim, tp);
    case Op::reduce_scatter_sequence: return reduce_scatter(x, kSequenceDim, tp);
  }
  return x;
}

// One autograd function per (forward, backward) pair; the group travels in the context.
template <Op Forward, Op Backward>
struct Mapping : public torch::autograd::Function<Mapping<Forward, Backward>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               Communicator* tp) {
    ctx->saved_data["tp"] = reinterpret_cast<int64_t>(tp);
    return apply(Forward, x, *tp);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* tp = reinterpret_cast<Communicator*>(ctx->saved_data["tp"].toInt());
    return {apply(Backward, grads[0], *tp), torch::Tensor()};
  }
};

template <Op Forward, Op Backward>
torch::Tensor map(const torch::Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return x;
  return Mapping<Forward, Backward>::apply(x, &tp);
}

int64_t divide(int64_t value, int64_t parts, const char* what) {
  TRIDENT_CHECK(value % parts == 0, what, " (", value, ") is not divisible by the tensor-parallel size ", parts);
  return value / parts;
}

}  // namespace

torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, Communicator& tp) {
  return map<Op::identity, Op::all_reduce>(x, tp);
}
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, Communicator& tp) {
  return map<Op::all_reduce, Op::identity>(x, tp);
}
torch::Tensor scatter_to_tensor_parallel(const torch::Tensor& x, Communicator& tp) {
  return map<Op::split_last, Op::gather_last>(x, tp);
}
torch::Tensor gather_from_tensor_parallel(const torch::Tensor& x, Communicator& tp) {
  return map<Op::gather_last, Op::split_last>(x, tp);
}
torch::Tensor scatter_to_sequence_parallel(const torch::Tensor& x, Communicator& tp) {
  return map<Op::split_sequence, Op::gather_sequence>(x, tp);
}
torch::Tensor gather_from_sequence_parallel(const torch::Tensor& x, Communicator& tp) {
  return map<Op::gather_sequence, Op::reduce_scatter_sequence>(x, tp);
}
torch::Tensor reduce_scatter_to_sequence_parallel(const torch::Tensor& x, Communicator& tp) {
  return map<Op::reduce_scatter_sequence, Op::gather_sequence>(x, tp);
}

namespace {

// x W^T + b over x's last dimension by `multiply`.
torch::Tensor linear_by(LinearMultiply multiply, const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias = {}) {
  if (multiply == LinearMultiply::fp8) return fp8::linear(x, weight, bias);
  return linear_over_rows(x, weight, bias);
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, TensorParallel tp,
                                                   Init init, ColumnOutput output, bool with_bias)
    : tp_(std::move(tp)), output_(output) {
  const int64_t local = divide(out, tp_.group->size(), "a column-parallel layer's output size");
  weight = register_parameter("weight", torch::empty({local, in}), ParameterRole::split(0).with_init(init));
  if (with_bias)
    bias = register_parameter("bias", torch::zeros({local}),
                              ParameterRole::split(0).with_init(Init::zeros).without_decay());
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  auto y = column_parallel_sharing_input({this}, x)[0];
  return output_ == ColumnOutput::gathered ? gather_from_tensor_parallel(y, *tp_.group) : y;
}

std::vector<torch::Tensor> column_parallel_sharing_input(const std::vector<ColumnParallelLinearImpl*>& layers,
                                                         const torch::Tensor& x) {
  TRIDENT_CHECK(!layers.empty(), "column_parallel_sharing_input takes at least one layer");
  const ColumnParallelLinearImpl& first = *layers[0];
  std::vector<torch::Tensor> weights, biases, outputs;
  for (const auto* layer : layers) {
    TRIDENT_CHECK(layer->tp_.group == first.tp_.group && layer->tp_.sequence_parallel == first.tp_.sequence_parallel &&
                      layer->multiply_ == first.multiply_ && layer->bias.defined() == first.bias.defined() &&
                      (layers.size() == 1 || layer->output_ == ColumnOutput::split),
                  "column-parallel layers sharing an input need one group, one sequence parallelism, one multiply, "
                  "biases all or none and outputs left split");
    weights.push_back(layer->weight);
    if (layer->bias.defined()) biases.push_back(layer->bias);
  }
  Communicator& tp = *first.tp_.group;
  // With sequence parallelism the multiplies keep x, the shard, for their weights' gradients
  // rather than the gathered rows (FP8's keep their 8-bit copy of the gathered rows).
  if (first.tp_.sequence_parallel && tp.size() > 1 && first.multiply_ == LinearMultiply::native)
    return multiply_gathered_shard(x, weights, biases, tp);
  const auto input =
      first.tp_.sequence_parallel ? gather_from_sequence_parallel(x, tp) : copy_to_tensor_parallel(x, tp);
  if (first.multiply_ == LinearMultiply::fp8) return fp8::linears(input, weights, biases);
  const auto rows = input.reshape({-1, input.size(-1)});
  for (const auto* layer : layers)
    outputs.push_back(in_shape_of(multiply_rows(rows, layer->weight, layer->bias), input));
  return outputs;
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, TensorParallel tp, Init init,
                                             RowInput input, bool with_bias)
    : tp_(std::move(tp)), input_(input) {
  TRIDENT_CHECK(!tp_.sequence_parallel || input_ != RowInput::whole,
                "a row-parallel layer with sequence parallelism needs its input already split");
  const int64_t local = divide(in, tp_.group->size(), "a row-parallel layer's input size");
  weight = register_parameter("weight", torch::empty({out, local}), ParameterRole::split(1).with_init(init));
  if (with_bias)
    bias = register_parameter(
        "bias", torch::zeros({out}),
        ParameterRole::whole().with_init(Init::zeros).without_decay().partial_over_tp_when(tp_.sequence_parallel));
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  Communicator& tp = *tp_.group;
  auto input = input_ == RowInput::split ? x : scatter_to_tensor_parallel(x, tp);
  // One rank reduces nothing: the bias goes into the multiply (one pass over the output less).
  if (tp.size() == 1) return linear_by(multiply_, input, weight, bias);
  auto partial = linear_by(multiply_, input, weight);
  auto y = tp_.sequence_parallel ? reduce_scatter_to_sequence_parallel(partial, tp)
                                 : reduce_from_tensor_parallel(partial, tp);
  return bias.defined() ? y + bias : y;
}

void set_linear_multiply(torch::nn::Module& root, LinearMultiply multiply) {
  for (const auto& module : root.modules()) {
    if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(module.get())) column->multiply_in(multiply);
    if (auto* row = dynamic_cast<RowParallelLinearImpl*>(module.get())) row->multiply_in(multiply);
  }
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab, int64_t hidden, TensorParallel tp,
                                                       Tied tied)
    : tp_(std::move(tp)) {
  const int64_t local = divide(vocab, tp_.group->size(), "the padded vocabulary");
  vocab_start_ = local * tp_.group->rank();
  vocab_end_ = vocab_start_ + local;
  weight = register_parameter("weight", torch::empty({local, hidden}), ParameterRole::split(0).tied_as(tied).padded_for_layout());
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  if (tp_.group->size() == 1) return torch::embedding(weight, ids);
  auto outside = (ids < vocab_start_).logical_or(ids >= vocab_end_);
  auto local_ids = (ids - vocab_start_).masked_fill(outside, 0);
  auto rows = torch::embedding(weight, local_ids).masked_fill(outside.unsqueeze(-1), 0.0);
  return reduce_from_tensor_parallel(rows, *tp_.group);
}

namespace {

struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, Communicator* tp) {
    const int64_t local = logits.size(-1), start = local * tp->rank();
    auto max = std::get<0>(logits.max(-1)).contiguous();
    tp->all_reduce(max, ReduceOp::max);
    auto shifted = logits - max.unsqueeze(-1);

    auto outside = (targets < start).logical_or(targets >= start + local);
    auto local_targets = (targets - start).masked_fill(outside, 0);
    auto target_logit = shifted.gather(-1, local_targets.unsqueeze(-1)).squeeze(-1)
                            .masked_fill(outside, 0.0).contiguous();
    tp->all_reduce(target_logit, ReduceOp::sum);

    auto exp = shifted.exp();
    auto sum_exp = exp.sum(-1).contiguous();
    tp->all_reduce(sum_exp, ReduceOp::sum);

    ctx->save_for_backward({exp.div_(sum_exp.unsqueeze(-1)), local_targets, outside});
    ctx->saved_data["tp"] = reinterpret_cast<int64_t>(tp);
    return sum_exp.log() - target_logit;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    // (softmax - one-hot of the target) x the incoming gradient, in the saved softmax's place:
    // backward runs once, and the minus one belongs to the rank whose slice holds the target.
    auto grad = saved[0];
    auto minus_one = saved[2].logical_not().to(grad.scalar_type()).neg().unsqueeze(-1);
    grad.scatter_add_(-1, saved[1].unsqueeze(-1), minus_one);
    return {grad.mul_(grads[0].unsqueeze(-1)), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           Communicator& tp) {
  // A whole vocabulary: LibTorch's fused log-softmax and NLL, fewer passes over the logits.
  if (tp.size() == 1) return at::cross_entropy_loss(logits, targets, {}, at::Reduction::None);
  return VocabParallelCrossEntropy::apply(logits, targets, &tp);
}

}  // namespace trident
