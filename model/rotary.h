// Rotary position embedding (RoPE, Su et al. 2021) in Hugging Face's convention: channel i of a
// head pairs with channel i + d/2 (not with its neighbour, as Meta's original checkpoints do),
//
//   rotate(x) = x * cos(p w) + rotate_half(x) * sin(p w),   rotate_half([x1, x2]) = [-x2, x1],
//
// where p is the token's position in the whole sequence and w = [w_0 .. w_{d/2-1}, w_0 .. w_{d/2-1}]
// with w_i = theta^(-2i/d), optionally rescaled as Llama 3.1 does for long contexts.
#pragma once

#include <torch/types.h>

#include "core/config.h"

namespace trident {

class Rotary {
 public:
  explicit Rotary(const ModelConfig& config);
  // The cos and sin tables [s, d] for the global `positions` [s] (or [b, 1, s, d] for each
  // sample's own positions [b, s]), in `dtype` (computed in fp64 for fp64, else in fp32 as
  // Hugging Face does).
  std::pair<torch::Tensor, torch::Tensor> tables(const torch::Tensor& positions, torch::Dtype dtype) const;
  // Rotates queries or keys [b, heads, s, d] by the tables of their positions (on CUDA with
  // `fused_kernels`, in one kernel: model/fused_kernels.h).
  static torch::Tensor rotate(const torch::Tensor& x, const std::pair<torch::Tensor, torch::Tensor>& tables,
                              bool fused_kernels);

 private:
  int64_t head_dim_;
  double theta_;
  RopeScaling scaling_;
};

// Llama 3.1's scaling of the frequencies w_i (rope_scaling "llama3" in Hugging Face's
// config.json, with these constants): long wavelengths slowed by `factor`, short ones kept, the
// band between interpolated.
struct Llama3RopeScaling {
  static constexpr double factor = 8, low_freq_factor = 1, high_freq_factor = 4;
  static constexpr int64_t original_max_position_embeddings = 8192;
};

}  // namespace trident
