#include "optim/adamw.h"

#include <cmath>

namespace trident {

void adamw_update(std::vector<AdamWSlice>& slices, const OptimizerConfig& config, double lr,
                  int64_t step) {
  torch::NoGradGuard no_grad;
  const double b1 = config.beta1, b2 = config.beta2;
  const double correction1 = 1 - std::pow(b1, double(step));
  const double correction2 = 1 - std::pow(b2, double(step));
  for (auto& s : slices) {
    if (config.weight_decay != 0)
      for (const auto& [offset, length] : s.decayed)
        s.param.narrow(0, offset, length).mul_(1 - lr * config.weight_decay);
    s.exp_avg.mul_(b1).add_(s.grad, 1 - b1);
    s.exp_avg_sq.mul_(b2).addcmul_(s.grad, s.grad, 1 - b2);
    auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(correction2)).add_(config.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / correction1);
  }
}

}  // namespace trident
