#include "model/layers.h"

#include <torch/autograd.h>

#include "model/fused_kernels.h"

namespace trident {
namespace {

// RMSNorm as Hugging Face's LlamaRMSNorm computes it, y = w * (x * rstd) with x * rstd in at least
// fp32 and rstd = 1 / sqrt(mean(x^2) + epsilon) per row, with a backward of its own: autograd of
// that formula would keep an fp32 copy of x and the normalised output; this keeps x and rstd.
//   dL/dw = sum over rows of dy * n,   dL/dx = rstd (dn - n mean(dn * n)),   dn = dy * w, n = x * rstd
struct RmsNorm : public torch::autograd::Function<RmsNorm> {
  static torch::Dtype wide(const torch::Tensor& x) { return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat; }

  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               double epsilon) {
    const auto wide_x = x.to(wide(x));
    const auto rstd = torch::rsqrt(wide_x.pow(2).mean(-1, /*keepdim=*/true) + epsilon);
    ctx->save_for_backward({x, weight, rstd});
    return weight * (wide_x * rstd).to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2], &dy = grads[0];
    // A split backward asks for one of the two (parallel/split_backward.h): the weight's alone
    // must not read the weight, which ZeRO-3 may have freed by then.
    const auto normed = x.to(wide(x)) * rstd;
    torch::Tensor grad_x, grad_weight;
    if (ctx->needs_input_grad(1))
      grad_weight = (dy * normed.to(x.scalar_type())).reshape({-1, dy.size(-1)}).sum(0).to(weight.scalar_type());
    if (ctx->needs_input_grad(0)) {
      const auto dn = (dy * weight).to(wide(x));
      grad_x = (rstd * (dn - normed * (dn * normed).mean(-1, /*keepdim=*/true))).to(x.scalar_type());
    }
    return {grad_x, grad_weight, torch::Tensor()};
  }
};

// LayerNorm with LibTorch's kernels both ways, as at::layer_norm, except a backward asked for
// the weight and bias alone (a split backward's W, parallel/split_backward.h): it computes them
// from the saved mean and rstd without reading the weight, which ZeRO-3 may have freed by then.
struct LayerNorm : public torch::autograd::Function<LayerNorm> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, double epsilon) {
    auto [y, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, weight, bias, epsilon);
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3], &rstd = saved[4];
    const torch::Tensor& dy = grads[0];
    const int64_t width = x.size(-1);
    const bool dx = ctx->needs_input_grad(0), dw = ctx->needs_input_grad(1), db = ctx->needs_input_grad(2);
    if (dx) {
      auto [grad_x, grad_weight, grad_bias] =
          at::native_layer_norm_backward(dy, x, {width}, mean, rstd, weight, bias, {dx, dw, db});
      return {grad_x, grad_weight, grad_bias, torch::Tensor()};
    }
    const auto rows = dy.reshape({-1, width});
    const auto normed = (x.reshape({-1, width}) - mean.reshape({-1, 1})) * rstd.reshape({-1, 1});
    return {torch::Tensor(), dw ? (rows * normed).sum(0).to(weight.scalar_type()) : torch::Tensor(),
            db ? rows.sum(0).to(weight.scalar_type()) : torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

NormImpl::NormImpl(Normalization kind, int64_t hidden, double epsilon, const TensorParallel& tp, bool fused_kernels)
    : NormImpl(kind, hidden, epsilon, tp.sequence_parallel, fused_kernels) {}

NormImpl::NormImpl(Normalization kind, int64_t width, double epsilon, bool partial_over_tp, bool fused_kernels)
    : kind_(kind), hidden_(width), epsilon_(epsilon), fused_kernels_(fused_kernels) {
  const auto role = ParameterRole::whole().without_decay().partial_over_tp_when(partial_over_tp);
  weight = register_parameter("weight", torch::empty({width}), role.with_init(Init::ones));
  if (kind_ == Normalization::layernorm)
    bias = register_parameter("bias", torch::empty({width}), role.with_init(Init::zeros));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (fused::applies(x, fused_kernels_)) return fused::norm(x, weight, bias, epsilon_);
  if (kind_ == Normalization::layernorm) return LayerNorm::apply(x, weight, bias, epsilon_);
  return RmsNorm::apply(x, weight, epsilon_);
}

std::pair<torch::Tensor, torch::Tensor> NormImpl::add_then_forward(const torch::Tensor& residual,
                                                                   const torch::Tensor& delta) {
  if (fused::applies(residual, fused_kernels_)) return fused::add_norm(residual, delta, weight, bias, epsilon_);
  auto sum = residual + delta;
  return {sum, forward(sum)};
}

PositionEmbeddingImpl::PositionEmbeddingImpl(int64_t positions, int64_t hidden) {
  weight = register_parameter("weight", torch::empty({positions, hidden}), ParameterRole::whole());
}

torch::Tensor mlp_activation(const torch::Tensor& gate, const torch::Tensor& up, bool fused_kernels) {
  const bool fused = fused::applies(up, fused_kernels);
  if (gate.defined()) return fused ? fused::swiglu(gate, up) : at::silu(gate) * up;
  return fused ? fused::gelu(up) : at::gelu(up, "tanh");
}

torch::Tensor PositionEmbeddingImpl::forward(const torch::Tensor& positions) {
  return torch::embedding(weight, positions);
}

}  // namespace trident
