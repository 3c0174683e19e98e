#include "optim/grad_clip.h"

#include <cmath>

namespace trident {

torch::Tensor grad_square_sum(const std::vector<torch::Tensor>& params) {
  // Accumulated on the gradients' device: no host synchronisation until the caller reads it.
  torch::Tensor total;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    auto squares = p.grad().to(torch::kDouble).square().sum();
    total = total.defined() ? total + squares : squares;
  }
  return total.defined() ? total : torch::zeros({}, torch::kDouble);
}

double clip_grads(const std::vector<torch::Tensor>& params, double norm, double max_norm) {
  // The 1e-6 keeps the coefficient finite at a zero norm, as torch.nn.utils.clip_grad_norm_ does.
  const double coefficient = max_norm / (norm + 1e-6);
  if (max_norm > 0 && coefficient < 1.0) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().mul_(coefficient);
  }
  return norm;
}

}  // namespace trident
