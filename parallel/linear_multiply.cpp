#include "parallel/linear_multiply.h"

#include <torch/autograd.h>
#include <torch/version.h>

#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/logging.h"
#include "core/error.h"

// LibTorch's addmm with an output dtype of its own (fp32 from 16-bit operands) came with 2.8.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define TRIDENT_ADDMM_OUT_DTYPE 1
#endif

namespace trident {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The registered weights' targets, by the weight's TensorImpl (a parameter keeps its impl when
// ZeRO moves its storage). Backward may run on the engine's device threads.
class Targets {
 public:
  void set(const torch::Tensor& weight, GradTarget target) {
    const std::lock_guard<std::mutex> lock(mutex_);
    targets_[weight.unsafeGetTensorImpl()] = std::move(target);
  }
  void erase(const torch::Tensor& weight) {
    const std::lock_guard<std::mutex> lock(mutex_);
    targets_.erase(weight.unsafeGetTensorImpl());
  }
  bool has(const c10::TensorImpl* weight) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return targets_.count(weight) > 0;
  }
  // The target's tensor, undefined when `weight` is not (or no longer) registered.
  torch::Tensor find(const c10::TensorImpl* weight) {
    GradTarget target;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      const auto found = targets_.find(weight);
      if (found == targets_.end()) return {};
      target = found->second;
    }
    return target();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const c10::TensorImpl*, GradTarget> targets_;
};

Targets& targets() {
  static Targets instance;
  return instance;
}

// Whether this LibTorch's cuBLAS path adds 16-bit products into an fp32 output (its first
// releases with the fp32 output took the added tensor in the operands' type only): asked once.
bool cuda_adds_into_fp32(const torch::Tensor& like) {
#ifdef TRIDENT_ADDMM_OUT_DTYPE
  static const bool adds = [&] {
    try {
      auto sum = torch::ones({16, 16}, like.options().dtype(torch::kFloat));
      const auto ones = torch::ones({16, 16}, like.options());
      at::addmm_out(sum, sum, ones, ones, torch::kFloat);
      if (sum[0][0].item<float>() == 17.0f) return true;
    } catch (const c10::Error&) {
    }
    log::warn(str("LibTorch ", TORCH_VERSION, " cannot add a 16-bit multiply into an fp32 gradient buffer: ",
                  "each 16-bit weight gradient is added in a pass of its own"));
    return false;
  }();
  return adds;
#else
  (void)like;
  return false;
#endif
}

// target += g^T rows in fp32, g and rows 16-bit (or any type on the CPU).
void add_weight_grad(torch::Tensor& target, const torch::Tensor& g, const torch::Tensor& rows) {
#ifdef TRIDENT_ADDMM_OUT_DTYPE
  if (target.is_cuda() && target.scalar_type() == torch::kFloat && cuda_adds_into_fp32(rows)) {
    at::addmm_out(target, target, g.t(), rows, torch::kFloat);
    return;
  }
#endif
  if (target.is_cuda())
    target.add_(g.t().mm(rows));
  else
    target.addmm_(g.t().to(target.scalar_type()), rows.to(target.scalar_type()));
}

// rows W^T (+ b) whose backward adds W's gradient into its target. The bias comes as a list
// (empty or one): an undefined tensor is no autograd input.
struct MultiplyIntoGradBuffer : public torch::autograd::Function<MultiplyIntoGradBuffer> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, const torch::Tensor& weight,
                               at::TensorList bias) {
    ctx->save_for_backward({rows, weight});
    ctx->saved_data["weight"] = reinterpret_cast<int64_t>(weight.unsafeGetTensorImpl());
    ctx->saved_data["with_bias"] = !bias.empty();
    return bias.empty() ? at::mm(rows, weight.t()) : at::addmm(bias[0], rows, weight.t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &rows = saved[0], &weight = saved[1], &g = grads[0];
    const bool with_bias = ctx->saved_data["with_bias"].toBool();
    variable_list out(with_bias ? 3 : 2);
    if (ctx->needs_input_grad(0)) out[0] = g.mm(weight);
    if (ctx->needs_input_grad(1)) {
      const auto* key = reinterpret_cast<const c10::TensorImpl*>(ctx->saved_data["weight"].toInt());
      torch::Tensor target = targets().find(key);
      if (target.defined())
        add_weight_grad(target, g, rows);
      else  // its buffer has gone since the forward: the gradient goes to .grad
        out[1] = g.t().mm(rows);
    }
    if (with_bias && ctx->needs_input_grad(2)) out[2] = g.sum(0);
    return out;
  }
};

}  // namespace

void accumulate_grad_in(const torch::Tensor& weight, GradTarget target) { targets().set(weight, std::move(target)); }

void stop_accumulating_grad_in(const torch::Tensor& weight) { targets().erase(weight); }

torch::Tensor multiply_rows(const torch::Tensor& rows, const torch::Tensor& weight, const torch::Tensor& bias,
                            WeightGrad grad) {
  if (grad == WeightGrad::fused_where_registered && weight.requires_grad() && torch::GradMode::is_enabled() &&
      targets().has(weight.unsafeGetTensorImpl()))
    return bias.defined() ? MultiplyIntoGradBuffer::apply(rows, weight, at::TensorList(bias))
                          : MultiplyIntoGradBuffer::apply(rows, weight, at::TensorList());
  return bias.defined() ? at::addmm(bias, rows, weight.t()) : at::mm(rows, weight.t());
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
