#include "model/rotary.h"

#include <cmath>

#include "model/fused_kernels.h"

namespace trident {
namespace {

// w_i = theta^(-2i/d) for i < d/2, rescaled for Llama 3.1.
torch::Tensor frequencies(int64_t head_dim, double theta, RopeScaling scaling, torch::Dtype dtype) {
  const auto exponents = torch::arange(0, head_dim, 2, torch::kLong).to(dtype) / double(head_dim);
  auto w = torch::pow(theta, exponents).reciprocal();
  if (scaling == RopeScaling::none) return w;
  using S = Llama3RopeScaling;
  const double low_wavelength = double(S::original_max_position_embeddings) / S::low_freq_factor;
  const double high_wavelength = double(S::original_max_position_embeddings) / S::high_freq_factor;
  const auto wavelength = (2 * M_PI) / w;
  // Long wavelengths are slowed by the factor, short ones kept; between them a blend.
  const auto slowed = torch::where(wavelength > low_wavelength, w / S::factor, w);
  const auto smooth = (double(S::original_max_position_embeddings) / wavelength - S::low_freq_factor) /
                      (S::high_freq_factor - S::low_freq_factor);
  const auto blended = (1 - smooth) * slowed / S::factor + smooth * slowed;
  const auto between = wavelength.ge(high_wavelength).logical_and(wavelength.le(low_wavelength));
  return torch::where(between, blended, slowed);
}

}  // namespace

Rotary::Rotary(const ModelConfig& config)
    : head_dim_(config.head_dim()), theta_(config.rope_theta), scaling_(config.rope_scaling) {}

std::pair<torch::Tensor, torch::Tensor> Rotary::tables(const torch::Tensor& positions, torch::Dtype dtype) const {
  const auto wide = dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
  const auto w = frequencies(head_dim_, theta_, scaling_, wide).to(positions.device());
  const auto angles = positions.to(wide).unsqueeze(-1) * w;  // [s, d/2] or [b, s, d/2]
  auto both = torch::cat({angles, angles}, -1);                 // [s, d] or [b, s, d]
  if (positions.dim() == 2) both = both.unsqueeze(1);           // [b, 1, s, d]: each sample's own
  return {both.cos().to(dtype), both.sin().to(dtype)};
}

torch::Tensor Rotary::rotate(const torch::Tensor& x, const std::pair<torch::Tensor, torch::Tensor>& tables,
                             bool fused_kernels) {
  if (fused::applies(x, fused_kernels)) return fused::rotary(x, tables.first, tables.second);
  const int64_t half = x.size(-1) / 2;
  const auto rotated_half = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * tables.first + rotated_half * tables.second;
}

}  // namespace trident
