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

// Y = X W^T + b, its three multiplies in FP8 (the TN layout throughout):
//   forward   Y  [M, N] = X8 [M, K]     x (W8 [N, K])^T          e4m3 x e4m3
//   backward  dX [M, K] = G8 [M, N]     x (W8^T [K, N])^T        e5m2 x e4m3
//             dW [N, K] = G8^T [N, M]   x (X8^T [K, M])^T        e5m2 x e4m3
// where (A)^T of a contiguous A is the column-major operand the multiply takes.
struct Linear : public torch::autograd::Function<Linear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const std::optional<torch::Tensor>& bias) {
    const int64_t in = weight.size(1), out = weight.size(0);
    const auto rows = x.reshape({-1, in});
    check_multiple_of_16(rows.size(0), in, out);
    const Quantised qx = quantise(rows, Format::e4m3, true, weight.requires_grad());
    const Quantised qw = quantise(weight, Format::e4m3, true, false);
    // The bias goes into the multiply's output pass where its type is the output's 16-bit type.
    const bool bias_inside = bias && bias->scalar_type() == x.scalar_type() && x.scalar_type() != torch::kFloat;
    auto y = at::_scaled_mm(qx.rows, qw.rows.t(), qx.inverse_scale, qw.inverse_scale, bias_inside ? bias : std::nullopt,
                            std::nullopt, x.scalar_type(), /*use_fast_accum=*/true);
    if (bias && !bias_inside) y.add_(*bias);
    ctx->save_for_backward({qx.transposed, qx.inverse_scale, weight, qw.scale});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["bias"] = bias.has_value();  // an absent bias is no input edge of the graph
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = out;
    return y.view(sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x_transposed = saved[0], &x_inverse = saved[1], &weight = saved[2], &w_scale = saved[3];
    const auto x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const int64_t out = weight.size(0);
    const auto g = grads[0].reshape({-1, out});  // of y's type, which is x's
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const Quantised qg = quantise(g, Format::e5m2, need_x, need_w);
    torch::Tensor dx, dw, db;
    if (need_x) {
      const Quantised qw = quantise_with(weight, w_scale, Format::e4m3, false, true);
      dx = at::_scaled_mm(qg.rows, qw.transposed.t(), qg.inverse_scale, qw.inverse_scale, std::nullopt, std::nullopt,
                          g.scalar_type())
               .view(x_sizes);
    }
    if (need_w)
      dw = at::_scaled_mm(qg.transposed, x_transposed.t(), qg.inverse_scale, x_inverse, std::nullopt, std::nullopt,
                          weight.scalar_type());
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      db = g.sum(0, /*keepdim=*/false, torch::kFloat).to(weight.scalar_type());
    return {dx, dw, db};
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

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return Linear::apply(x, weight, bias.defined() ? std::optional<torch::Tensor>(bias) : std::nullopt);
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
torch::Tensor linear(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { unavailable(); }

#endif

}  // namespace trident::fp8
