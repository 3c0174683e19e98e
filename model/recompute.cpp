#include "model/recompute.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <mutex>

namespace trident {
namespace {

at::Tensor cpu_rng_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

struct Recompute : public torch::autograd::Function<Recompute> {
  // Tensors travel as a TensorList so that autograd connects each of them to the graph.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx,
                               const RecomputedFunction* function, at::TensorList inputs) {
    ctx->saved_data["function"] = reinterpret_cast<int64_t>(function);
    ctx->saved_data["rng"] = cpu_rng_state();
    ctx->save_for_backward(inputs.vec());
    return (*function)(inputs.vec());  // autograd records nothing inside a Function's forward
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* function = reinterpret_cast<const RecomputedFunction*>(ctx->saved_data["function"].toInt());
    std::vector<torch::Tensor> inputs;
    for (const auto& saved : ctx->get_saved_variables())
      inputs.push_back(saved.detach().requires_grad_(saved.requires_grad()));
    // Replay the forward with the RNG as it was, then put the RNG back where backward left it.
    const at::Tensor now = cpu_rng_state();
    set_cpu_rng_state(ctx->saved_data["rng"].toTensor());
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      output = (*function)(inputs);
    }
    set_cpu_rng_state(now);
    torch::autograd::backward({output}, {grads[0]});
    torch::autograd::variable_list result = {torch::Tensor()};  // for `function`
    for (const auto& input : inputs) result.push_back(input.requires_grad() ? input.grad() : torch::Tensor());
    return result;
  }
};

}  // namespace

torch::Tensor recompute(const RecomputedFunction& function, const std::vector<torch::Tensor>& inputs) {
  return Recompute::apply(&function, at::TensorList(inputs));
}

}  // namespace trident
