#include "optim/grad_clip.h"

namespace trident {

torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm) {
  if (max_norm <= 0) return torch::ones_like(norm);
  // The 1e-6 keeps the factor finite at a zero norm, as torch.nn.utils.clip_grad_norm_ does.
  return (max_norm / (norm + 1e-6)).clamp_max(1.0);
}

}  // namespace trident
