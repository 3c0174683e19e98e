#include "model/fused_kernels.h"

#include "core/error.h"

#ifdef TRIDENT_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include <optional>

#include "model/fused_kernels_cuda.h"
#endif

namespace trident::fused {

#ifdef TRIDENT_FUSED_KERNELS

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::Element element(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kFloat: return cuda::Element::f32;
    case torch::kHalf: return cuda::Element::f16;
    case torch::kBFloat16: return cuda::Element::bf16;
    default: fail("the fused CUDA kernels take fp32, fp16 or bf16 tensors, not ", x.scalar_type());
  }
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// `t` contiguous and of x's element type and device, or undefined when `t` is.
torch::Tensor like(const torch::Tensor& t, const torch::Tensor& x, const char* what) {
  if (!t.defined()) return t;
  TRIDENT_CHECK(t.scalar_type() == x.scalar_type() && t.device() == x.device(), "fused kernels: ", what, " is ",
                t.scalar_type(), " on ", t.device(), ", the input ", x.scalar_type(), " on ", x.device());
  return t.contiguous();
}

void* data_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

std::optional<torch::Tensor> optional(const torch::Tensor& t) {
  return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
}

// Normalisation (LayerNorm with a bias, else RMSNorm), with an optional residual add before it.
// forward's outputs: {y} or, with a delta, {sum, y}.
struct Norm : public torch::autograd::Function<Norm> {
  // delta and bias are optional (autograd takes no undefined tensor as an input).
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& input, const std::optional<torch::Tensor>& delta,
                               const torch::Tensor& weight, const std::optional<torch::Tensor>& bias, double epsilon) {
    const c10::cuda::CUDAGuard device(input.device());
    const auto x = input.contiguous(), d = like(delta.value_or(torch::Tensor()), x, "the residual's delta"),
               w = like(weight, x, "the weight"), b = like(bias.value_or(torch::Tensor()), x, "the bias");
    const int64_t hidden = x.size(-1), rows = x.numel() / hidden;
    TRIDENT_CHECK(w.numel() == hidden && (!b.defined() || b.numel() == hidden), "fused norm: weight ", w.sizes(),
                  " for rows of ", hidden);
    const bool centered = b.defined();
    const auto stats = x.options().dtype(torch::kFloat);
    const auto mean = centered ? torch::empty({rows}, stats) : torch::Tensor(), rstd = torch::empty({rows}, stats);
    const auto sum = d.defined() ? torch::empty_like(x) : torch::Tensor(), y = torch::empty_like(x);
    cuda::norm_forward(element(x), centered, x.data_ptr(), data_or_null(d), w.data_ptr(), data_or_null(b),
                       data_or_null(sum), y.data_ptr(), centered ? mean.data_ptr<float>() : nullptr,
                       rstd.data_ptr<float>(), rows, hidden, float(epsilon), stream());
    ctx->save_for_backward({d.defined() ? sum : x, w, mean, rstd});
    ctx->saved_data["centered"] = centered;
    ctx->saved_data["added"] = d.defined();
    if (d.defined()) return {sum, y};
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    const bool centered = ctx->saved_data["centered"].toBool(), added = ctx->saved_data["added"].toBool();
    const c10::cuda::CUDAGuard device(x.device());
    const torch::Tensor dsum = added ? like(grads[0], x, "the sum's gradient") : torch::Tensor();
    torch::Tensor dy = grads[added ? 1 : 0];
    dy = dy.defined() ? like(dy, x, "the gradient") : torch::zeros_like(x);
    const int64_t hidden = x.size(-1), rows = x.numel() / hidden, blocks = cuda::norm_partial_blocks(rows);
    if (!ctx->needs_input_grad(0) && !(added && ctx->needs_input_grad(1))) {
      // The weights' half of a split backward (parallel/split_backward.h): no input gradient, and
      // no read of the weight, which ZeRO-3 may have freed by then.
      const auto dy_rows = dy.reshape({rows, hidden}).to(torch::kFloat), x_rows = x.reshape({rows, hidden}).to(torch::kFloat);
      const auto normed = (centered ? x_rows - mean.unsqueeze(1) : x_rows) * rstd.unsqueeze(1);
      return {torch::Tensor(), torch::Tensor(), (dy_rows * normed).sum(0).to(w.scalar_type()),
              centered ? dy_rows.sum(0).to(w.scalar_type()) : torch::Tensor(), torch::Tensor()};
    }
    const auto partial = x.options().dtype(torch::kFloat);
    const auto dx = torch::empty_like(x), dw = torch::zeros({blocks, hidden}, partial);
    const auto db = centered ? torch::zeros({blocks, hidden}, partial) : torch::Tensor();
    cuda::norm_backward(element(x), centered, dy.data_ptr(), x.data_ptr(), w.data_ptr(),
                        centered ? mean.data_ptr<float>() : nullptr, rstd.data_ptr<float>(), data_or_null(dsum),
                        dx.data_ptr(), dw.data_ptr<float>(), centered ? db.data_ptr<float>() : nullptr, rows, hidden,
                        stream());
    const auto weight_grad = dw.sum(0).to(w.scalar_type());
    const auto bias_grad = centered ? db.sum(0).to(w.scalar_type()) : torch::Tensor();
    return {dx, added ? dx : torch::Tensor(), weight_grad, bias_grad, torch::Tensor()};
  }
};

struct Swiglu : public torch::autograd::Function<Swiglu> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    const c10::cuda::CUDAGuard device(gate.device());
    const auto g = gate.contiguous(), u = like(up, g, "up");
    TRIDENT_CHECK(g.sizes() == u.sizes(), "fused SwiGLU: gate ", g.sizes(), " and up ", u.sizes());
    auto y = torch::empty_like(g);
    cuda::swiglu_forward(element(g), g.data_ptr(), u.data_ptr(), y.data_ptr(), g.numel(), stream());
    ctx->save_for_backward({g, u});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard device(saved[0].device());
    const auto dy = like(grads[0], saved[0], "the gradient");
    auto dgate = torch::empty_like(saved[0]), dup = torch::empty_like(saved[1]);
    cuda::swiglu_backward(element(dy), dy.data_ptr(), saved[0].data_ptr(), saved[1].data_ptr(), dgate.data_ptr(),
                          dup.data_ptr(), dy.numel(), stream());
    return {dgate, dup};
  }
};

struct Gelu : public torch::autograd::Function<Gelu> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    const c10::cuda::CUDAGuard device(input.device());
    const auto x = input.contiguous();
    auto y = torch::empty_like(x);
    cuda::gelu_forward(element(x), x.data_ptr(), y.data_ptr(), x.numel(), stream());
    ctx->save_for_backward({x});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard device(x.device());
    const auto dy = like(grads[0], x, "the gradient");
    auto dx = torch::empty_like(x);
    cuda::gelu_backward(element(x), dy.data_ptr(), x.data_ptr(), dx.data_ptr(), x.numel(), stream());
    return {dx};
  }
};

// x [b, heads, s, d] rotated by tables [s, d] or [b, 1, s, d] into a contiguous tensor;
// `inverse` rotates back (the transpose: the backward).
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool inverse) {
  TRIDENT_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "fused rotary: x ", x.sizes(), " is not [b, heads, s, even d]");
  const bool per_sample = cos.dim() == 4;
  TRIDENT_CHECK(cos.sizes() == sin.sizes() && cos.size(-1) == x.size(3) && cos.size(-2) == x.size(2) &&
                    (per_sample ? cos.size(0) == x.size(0) && cos.size(1) == 1 : cos.dim() == 2),
                "fused rotary: tables ", cos.sizes(), " for x ", x.sizes());
  const auto c = like(cos, x, "the cos table"), s = like(sin, x, "the sin table");
  cuda::Strides4 shape{};
  for (int i = 0; i < 4; ++i) shape.size[i] = x.size(i), shape.stride[i] = x.stride(i);
  auto y = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
  cuda::rotary(element(x), x.data_ptr(), shape, c.data_ptr(), s.data_ptr(), per_sample ? c.stride(0) : 0,
               c.stride(-2), y.data_ptr(), inverse, stream());
  return y;
}

struct Rotary : public torch::autograd::Function<Rotary> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    const c10::cuda::CUDAGuard device(x.device());
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, /*inverse=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard device(grads[0].device());
    return {rotate(grads[0], saved[0], saved[1], /*inverse=*/true), torch::Tensor(), torch::Tensor()};
  }
};

struct CrossEntropy : public torch::autograd::Function<CrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& targets) {
    const c10::cuda::CUDAGuard device(input.device());
    TRIDENT_CHECK(input.dim() == 2 && targets.dim() == 1 && targets.size(0) == input.size(0) &&
                      targets.scalar_type() == torch::kLong && targets.device() == input.device(),
                  "fused cross-entropy: logits ", input.sizes(), " and targets ", targets.sizes(), " ",
                  targets.scalar_type());
    const auto logits = input.contiguous(), t = targets.contiguous();
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    const auto stats = logits.options().dtype(torch::kFloat);
    auto losses = torch::empty({rows}, stats), lse = torch::empty({rows}, stats);
    cuda::cross_entropy_forward(element(logits), logits.data_ptr(), t.data_ptr<int64_t>(), losses.data_ptr<float>(),
                                lse.data_ptr<float>(), rows, vocab, stream());
    ctx->save_for_backward({logits, t, lse});
    return losses;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const c10::cuda::CUDAGuard device(logits.device());
    const auto dlosses = grads[0].to(torch::kFloat).contiguous();
    auto dlogits = torch::empty_like(logits);
    cuda::cross_entropy_backward(element(logits), dlosses.data_ptr<float>(), logits.data_ptr(),
                                 targets.data_ptr<int64_t>(), lse.data_ptr<float>(), dlogits.data_ptr(),
                                 logits.size(0), logits.size(1), stream());
    return {dlogits, torch::Tensor()};
  }
};

}  // namespace

bool built() { return true; }

int compute_capability(const torch::Tensor& x) {
  return x.is_cuda() ? at::cuda::getDeviceProperties(x.get_device())->major : 0;
}

bool applies(const torch::Tensor& x, bool enabled) {
  const auto type = x.scalar_type();
  return enabled && x.is_cuda() && (type == torch::kFloat || type == torch::kHalf || type == torch::kBFloat16);
}

torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double epsilon) {
  return Norm::apply(x, std::optional<torch::Tensor>(), weight, optional(bias), epsilon)[0];
}

std::pair<torch::Tensor, torch::Tensor> add_norm(const torch::Tensor& residual, const torch::Tensor& delta,
                                                 const torch::Tensor& weight, const torch::Tensor& bias,
                                                 double epsilon) {
  TRIDENT_CHECK(residual.sizes() == delta.sizes(), "fused add and norm: ", residual.sizes(), " + ", delta.sizes());
  const auto outputs = Norm::apply(residual, std::optional<torch::Tensor>(delta), weight, optional(bias), epsilon);
  return {outputs[0], outputs[1]};
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) { return Swiglu::apply(gate, up); }

torch::Tensor gelu(const torch::Tensor& x) { return Gelu::apply(x); }

torch::Tensor rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return Rotary::apply(x, cos, sin);
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  return CrossEntropy::apply(logits, targets);
}

#else  // built without the CUDA toolkit or without a CUDA LibTorch: applies() is never true

namespace {
[[noreturn]] void not_built() {
  fail("this build of trident has no fused CUDA kernels (it was built without a CUDA LibTorch or the CUDA toolkit)");
}
}  // namespace

bool built() { return false; }
int compute_capability(const torch::Tensor&) { return 0; }
bool applies(const torch::Tensor&, bool) { return false; }
torch::Tensor norm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double) { not_built(); }
std::pair<torch::Tensor, torch::Tensor> add_norm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                 const torch::Tensor&, double) {
  not_built();
}
torch::Tensor swiglu(const torch::Tensor&, const torch::Tensor&) { not_built(); }
torch::Tensor gelu(const torch::Tensor&) { not_built(); }
torch::Tensor rotary(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { not_built(); }
torch::Tensor cross_entropy(const torch::Tensor&, const torch::Tensor&) { not_built(); }

#endif

}  // namespace trident::fused
