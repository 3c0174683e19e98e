#include "model/recompute.h"

#include <torch/autograd.h>

#include <string>

#include "parallel/split_backward.h"

namespace trident {
namespace {

// The streams' states as saved data: None for a stream that has not drawn yet.
void save_states(torch::autograd::AutogradContext* ctx, const DropoutStreams& streams) {
  const auto states = streams.states();
  for (size_t i = 0; i < states.size(); ++i)
    ctx->saved_data["rng" + std::to_string(i)] = states[i].defined() ? c10::IValue(states[i]) : c10::IValue();
}

std::vector<torch::Tensor> saved_states(torch::autograd::AutogradContext* ctx, size_t count) {
  std::vector<torch::Tensor> states;
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& state = ctx->saved_data["rng" + std::to_string(i)];
    states.push_back(state.isNone() ? torch::Tensor() : state.toTensor());
  }
  return states;
}

struct Recompute : public torch::autograd::Function<Recompute> {
  // Tensors travel as a TensorList so that autograd connects each of them to the graph.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const RecomputedFunction* function,
                               DropoutStreams* streams, at::TensorList inputs) {
    ctx->saved_data["function"] = reinterpret_cast<int64_t>(function);
    ctx->saved_data["streams"] = reinterpret_cast<int64_t>(streams);
    save_states(ctx, *streams);
    ctx->save_for_backward(inputs.vec());
    return (*function)(inputs.vec());  // autograd records nothing inside a Function's forward
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* function = reinterpret_cast<const RecomputedFunction*>(ctx->saved_data["function"].toInt());
    std::vector<torch::Tensor> inputs;
    for (const auto& saved : ctx->get_saved_variables())
      inputs.push_back(saved.detach().requires_grad_(saved.requires_grad()));
    // Replay the forward with the streams as they were, then put them back where backward left them.
    auto* streams = reinterpret_cast<DropoutStreams*>(ctx->saved_data["streams"].toInt());
    const std::vector<torch::Tensor> now = streams->states();
    streams->set_states(saved_states(ctx, now.size()));
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      output = (*function)(inputs);
    }
    streams->set_states(now);
    torch::autograd::variable_list result = {torch::Tensor(), torch::Tensor()};  // for `function`, `streams`
    if (WeightGrads* weights = SplitRecomputedBlocks::current()) {  // the I of a split backward
      std::vector<torch::Tensor> wanted;
      for (const auto& input : inputs)
        if (input.requires_grad()) wanted.push_back(input);
      const auto got = backward_inputs({output}, {grads[0]}, wanted, *weights);
      size_t next = 0;
      for (const auto& input : inputs) result.push_back(input.requires_grad() ? got[next++] : torch::Tensor());
      return result;
    }
    torch::autograd::backward({output}, {grads[0]});
    for (const auto& input : inputs) result.push_back(input.requires_grad() ? input.grad() : torch::Tensor());
    return result;
  }
};

}  // namespace

torch::Tensor recompute(const RecomputedFunction& function, const std::vector<torch::Tensor>& inputs,
                        DropoutStreams& streams) {
  return Recompute::apply(&function, &streams, at::TensorList(inputs));
}

}  // namespace trident
