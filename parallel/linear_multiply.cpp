#include "parallel/linear_multiply.h"

#include <torch/autograd.h>
#include <torch/version.h>

#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "core/logging.h"
#include "parallel/comm/backends.h"

// LibTorch's addmm with an output dtype of its own (fp32 from 16-bit operands) came with 2.8.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define TRIDENT_ADDMM_OUT_DTYPE 1
#endif

namespace trident {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The registered weights' targets, by the weight's TensorImpl (a parameter keeps its impl when
// ZeRO moves its storage: set_data). Backward may run on the engine's device threads.
class Targets {
 public:
  void set(const torch::Tensor& weight, GradTarget target) {
    const std::lock_guard<std::mutex> lock(mutex_);
    TRIDENT_CHECK(targets_.emplace(weight.unsafeGetTensorImpl(), std::move(target)).second, "a weight of ",
                  weight.sizes(), " already has its gradient accumulated in another buffer");
  }
  void erase(const torch::Tensor& weight) {
    const std::lock_guard<std::mutex> lock(mutex_);
    targets_.erase(weight.unsafeGetTensorImpl());
  }
  bool has(const c10::TensorImpl* weight) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return targets_.count(weight) > 0;
  }
  // The target's tensor, undefined when `weight` is not registered.
  torch::Tensor find(const c10::TensorImpl* weight) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = targets_.find(weight);
    return found == targets_.end() ? torch::Tensor() : found->second();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const c10::TensorImpl*, GradTarget> targets_;
};

Targets& targets() {
  static Targets instance;
  return instance;
}

// Whether this LibTorch's cuBLAS path adds 16-bit products into an fp32 output (2.8 brought the
// fp32 output; its first form took the added tensor in the operands' type only): asked once, on
// `device`, and said once when it does not.
bool cuda_adds_into_fp32(const torch::Device& device) {
  static const bool adds = [&] {
#ifdef TRIDENT_ADDMM_OUT_DTYPE
    try {
      auto sum = torch::ones({16, 16}, torch::dtype(torch::kFloat).device(device));
      const auto ones = torch::ones({16, 16}, torch::dtype(torch::kBFloat16).device(device));
      at::addmm_out(sum, sum, ones, ones, torch::kFloat);
      if (sum[0][0].item<float>() == 17.0f) return true;
    } catch (const c10::Error&) {
    }
#else
    (void)device;
#endif
    log::warn(str("LibTorch ", TORCH_VERSION, " cannot add a 16-bit multiply into an fp32 gradient buffer: ",
                  "each 16-bit weight gradient is added in a pass of its own"));
    return false;
  }();
  return adds;
}

// target += g^T rows in fp32.
void add_weight_grad(torch::Tensor& target, const torch::Tensor& g, const torch::Tensor& rows) {
  TRIDENT_CHECK(target.scalar_type() == torch::kFloat && is_16bit_float(rows) && g.scalar_type() == rows.scalar_type(),
                "gradient-accumulation fusion adds 16-bit products into fp32, not ", g.scalar_type(), " x ",
                rows.scalar_type(), " into ", target.scalar_type());
  if (!target.is_cuda()) {
    target.addmm_(g.t().to(torch::kFloat), rows.to(torch::kFloat));  // 16-bit products are exact in fp32
    return;
  }
  if (cuda_adds_into_fp32(target.device())) {
#ifdef TRIDENT_ADDMM_OUT_DTYPE
    at::addmm_out(target, target, g.t(), rows, torch::kFloat);
    return;
#endif
  }
  target.add_(g.t().mm(rows));
}

// rows W^T + b (the bias, when defined, added by cuBLAS as it writes).
torch::Tensor product(const torch::Tensor& rows, const torch::Tensor& weight, const torch::Tensor& bias) {
  return bias.defined() ? at::addmm(bias, rows, weight.t()) : at::mm(rows, weight.t());
}

// rows W^T (+ b) whose backward adds W's gradient into its target. The bias comes as a list
// (empty or one): an undefined tensor is no autograd input.
struct MultiplyIntoGradBuffer : public torch::autograd::Function<MultiplyIntoGradBuffer> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, const torch::Tensor& weight,
                               at::TensorList bias) {
    ctx->save_for_backward({rows, weight});
    ctx->saved_data["with_bias"] = !bias.empty();
    return product(rows, weight, bias.empty() ? torch::Tensor() : bias[0]);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();  // a saved leaf is the weight itself
    const torch::Tensor &rows = saved[0], &weight = saved[1], &g = grads[0];
    const bool with_bias = ctx->saved_data["with_bias"].toBool();
    variable_list out(with_bias ? 3 : 2);
    if (ctx->needs_input_grad(0)) out[0] = g.mm(weight);
    if (ctx->needs_input_grad(1)) out[1] = weight_gradient(weight, g, rows);
    if (with_bias && ctx->needs_input_grad(2)) out[2] = g.sum(0);
    return out;
  }
};

}  // namespace

void accumulate_grad_in(const torch::Tensor& weight, GradTarget target) { targets().set(weight, std::move(target)); }

void stop_accumulating_grad_in(const torch::Tensor& weight) { targets().erase(weight); }

torch::Tensor weight_gradient(const torch::Tensor& weight, const torch::Tensor& g, const torch::Tensor& rows) {
  torch::Tensor target = targets().find(weight.unsafeGetTensorImpl());
  if (!target.defined()) return g.t().mm(rows);
  add_weight_grad(target, g, rows);
  return {};
}

torch::Tensor multiply_rows(const torch::Tensor& rows, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (weight.requires_grad() && torch::GradMode::is_enabled() && targets().has(weight.unsafeGetTensorImpl()))
    return bias.defined() ? MultiplyIntoGradBuffer::apply(rows, weight, at::TensorList(bias))
                          : MultiplyIntoGradBuffer::apply(rows, weight, at::TensorList());
  return product(rows, weight, bias);
}

torch::Tensor in_shape_of(const torch::Tensor& product, const torch::Tensor& x) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = product.size(-1);
  return product.view(sizes);
}

torch::Tensor linear_over_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return in_shape_of(multiply_rows(x.reshape({-1, x.size(-1)}), weight, bias), x);
}

}  // namespace trident
