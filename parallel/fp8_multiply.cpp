#include "parallel/fp8_multiply.h"

#include <cmath>

#include <torch/version.h>

#include "core/error.h"

#if __has_include(<ATen/ops/_scaled_mm.h>)
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <torch/autograd.h>

#include <optional>
#define TRIDENT_FP8 1
#endif

#ifdef TRIDENT_FP8_CAST_KERNEL
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "parallel/fp8_cast_cuda.h"
#endif

namespace trident::fp8 {

bool cast_kernel_applies(const torch::Tensor& x) {
#ifdef TRIDENT_FP8_CAST_KERNEL
  return x.is_cuda();
#else
  (void)x;
  return false;
#endif
}

#ifdef TRIDENT_FP8

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Dtype dtype_of(Format format) { return format == Format::e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2; }
double largest(Format format) { return format == Format::e4m3 ? 448.0 : 57344.0; }

void check_multiple_of_16(int64_t rows, int64_t in, int64_t out) {
  if (rows % 16 == 0 && in % 16 == 0 && out % 16 == 0) return;
  fail("precision=fp8: a linear layer multiplies ", rows, " rows of ", in, " inputs into ", out,
       " outputs; FP8 multiplies need each of the three a multiple of 16 (the rows are the tokens of a micro-batch "
       "on this rank: batch.micro_batch_size x model.seq_length / the context-parallel size)");
}

// Y_i = X W_i^T + b_i for linear layers that take the same X, their three multiplies each in FP8
// (the TN layout throughout), X cast once:
//   forward   Y_i  [M, N] = X8 [M, K]     x (W_i8 [N, K])^T        e4m3 x e4m3
//   backward  dX   [M, K] = sum over i of G_i8 [M, N] x (W_i8^T [K, N])^T     e5m2 x e4m3
//             dW_i [N, K] = G_i8^T [N, M] x (X8^T [K, M])^T        e5m2 x e4m3
// where (A)^T of a contiguous A is the column-major operand the multiply takes. The inputs are x,
// the n weights, then n biases or none (LibTorch's functions take no undefined tensor in a list);
// the gradients follow them.
struct Linears : public torch::autograd::Function<Linears> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList weights,
                               at::TensorList biases) {
    TRIDENT_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()),
                  "fp8::linears: ", weights.size(), " weights and ", biases.size(), " biases");
    const int64_t in = weights[0].size(1);
    const auto rows = x.reshape({-1, in});
    bool weight_grads = false;
    for (const auto& weight : weights) {
      TRIDENT_CHECK(weight.size(1) == in, "fp8::linears: a weight of ", weight.sizes(), " beside one of ", in,
                    " inputs");
      check_multiple_of_16(rows.size(0), in, weight.size(0));
      weight_grads = weight_grads || weight.requires_grad();
    }
    const Quantised qx = quantise(rows, Format::e4m3, true, weight_grads);
    variable_list outputs, saved = {qx.transposed, qx.inverse_scale};
    for (size_t i = 0; i < weights.size(); ++i) {
      const auto& weight = weights[i];
      const torch::Tensor bias = biases.empty() ? torch::Tensor() : biases[i];
      const int64_t out = weight.size(0);
      const Quantised qw = quantise(weight, Format::e4m3, true, false);
      // The bias goes into the multiply's output pass where its type is the output's 16-bit type.
      const bool bias_inside =
          bias.defined() && bias.scalar_type() == x.scalar_type() && x.scalar_type() != torch::kFloat;
      auto y = at::_scaled_mm(qx.rows, qw.rows.t(), qx.inverse_scale, qw.inverse_scale,
                              bias_inside ? std::optional<torch::Tensor>(bias) : std::nullopt, std::nullopt,
                              x.scalar_type(), /*use_fast_accum=*/true);
      if (bias.defined() && !bias_inside) y.add_(bias);
      std::vector<int64_t> sizes = x.sizes().vec();
      sizes.back() = out;
      outputs.push_back(y.view(sizes));
      saved.push_back(weight);
      saved.push_back(qw.scale);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["with_bias"] = !biases.empty();
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x_transposed = saved[0], &x_inverse = saved[1];
    const auto x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const bool with_bias = ctx->saved_data["with_bias"].toBool();
    const size_t n = (saved.size() - 2) / 2;
    const bool need_x = ctx->needs_input_grad(0);
    variable_list out(1 + (with_bias ? 2 : 1) * n);
    for (size_t i = 0; i < n; ++i) {
      const torch::Tensor &weight = saved[2 + 2 * i], &w_scale = saved[3 + 2 * i];
      const auto g = grads[i].reshape({-1, weight.size(0)});  // of y's type, which is x's
      const bool need_w = ctx->needs_input_grad(1 + i);
      const Quantised qg = quantise(g, Format::e5m2, need_x, need_w);
      if (need_x) {
        const Quantised qw = quantise_with(weight, w_scale, Format::e4m3, false, true);
        const auto dx = at::_scaled_mm(qg.rows, qw.transposed.t(), qg.inverse_scale, qw.inverse_scale, std::nullopt,
                                       std::nullopt, g.scalar_type());
        out[0] = out[0].defined() ? out[0].add_(dx) : dx;
      }
      if (need_w)
        out[1 + i] = at::_scaled_mm(qg.transposed, x_transposed.t(), qg.inverse_scale, x_inverse, std::nullopt,
                                    std::nullopt, weight.scalar_type());
      if (with_bias && ctx->needs_input_grad(1 + n + i))
        out[1 + n + i] = g.sum(0, /*keepdim=*/false, torch::kFloat).to(weight.scalar_type());
    }
    if (out[0].defined()) out[0] = out[0].view(x_sizes);
    return out;
  }
};

}  // namespace

bool built() { return true; }

Quantised quantise(const torch::Tensor& x, Format format, bool rows, bool transposed) {
  const auto amax = at::linalg_vector_norm(x, INFINITY, at::OptionalIntArrayRef{}, false, torch::kFloat);
  return quantise_with(x, largest(format) / amax.clamp_min(1e-12), format, rows, transposed);
}

// One pass of the CUDA kernel writes both layouts; LibTorch's ops (the CPU) cast, then transpose.
// Both do the same arithmetic, an fp32 product and then round-to-nearest-even with saturation,
// so they write the same bytes.
Quantised quantise_with(const torch::Tensor& x, const torch::Tensor& scale, Format format, bool rows, bool transposed) {
  TRIDENT_CHECK(x.dim() == 2, "fp8::quantise takes a 2-D tensor, not ", x.sizes());
  const auto source = x.contiguous();
  Quantised q{{}, {}, scale, scale.reciprocal()};
#ifdef TRIDENT_FP8_CAST_KERNEL
  if (source.is_cuda()) {
    const c10::cuda::CUDAGuard device(source.device());
    cuda::Fp8Source type;
    switch (source.scalar_type()) {
      case torch::kFloat: type = cuda::Fp8Source::f32; break;
      case torch::kHalf: type = cuda::Fp8Source::f16; break;
      case torch::kBFloat16: type = cuda::Fp8Source::bf16; break;
      default: fail("the FP8 cast takes fp32, fp16 or bf16 tensors, not ", source.scalar_type());
    }
    const int64_t r = source.size(0), c = source.size(1);
    const auto options = source.options().dtype(dtype_of(format));
    if (rows) q.rows = torch::empty({r, c}, options);
    if (transposed) q.transposed = torch::empty({c, r}, options);
    const auto bytes = [](const torch::Tensor& t) {
      return t.defined() ? static_cast<uint8_t*>(t.data_ptr()) : nullptr;
    };
    cuda::fp8_cast(type, format == Format::e5m2, source.data_ptr(), scale.data_ptr<float>(), bytes(q.rows),
                   bytes(q.transposed), r, c, c10::cuda::getCurrentCUDAStream().stream());
    return q;
  }
#endif
  const double max = largest(format);
  const auto cast = (source.to(torch::kFloat) * scale).clamp(-max, max).to(dtype_of(format));
  if (rows) q.rows = cast;
  if (transposed) q.transposed = cast.t().contiguous();
  return q;
}

std::vector<torch::Tensor> linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                   const std::vector<torch::Tensor>& biases) {
  return Linears::apply(x, at::TensorList(weights), at::TensorList(biases));
}

#else

bool built() { return false; }

namespace {
[[noreturn]] void unavailable() {
  fail("precision=fp8 needs LibTorch 2.x (8-bit floats); this build has ", TORCH_VERSION);
}
}  // namespace

Quantised quantise(const torch::Tensor&, Format, bool, bool) { unavailable(); }
Quantised quantise_with(const torch::Tensor&, const torch::Tensor&, Format, bool, bool) { unavailable(); }
std::vector<torch::Tensor> linears(const torch::Tensor&, const std::vector<torch::Tensor>&,
                                   const std::vector<torch::Tensor>&) {
  unavailable();
}

#endif

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return bias.defined() ? linears(x, {weight}, {bias})[0] : linears(x, {weight}, {})[0];
}

}  // namespace trident::fp8
