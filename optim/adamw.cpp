#include "optim/adamw.h"

#include <torch/version.h>

#include <cmath>

namespace trident {
namespace {

#if TORCH_VERSION_MAJOR >= 2
void fused_update(std::vector<AdamWSlice>& slices, const OptimizerConfig& config, double lr,
                  int64_t step) {
  std::vector<torch::Tensor> params[2], grads[2], exp_avgs[2], exp_avg_sqs[2];
  for (auto& s : slices)
    for (const auto& run : s.runs) {
      const int k = run.decay ? 1 : 0;
      params[k].push_back(s.param.narrow(0, run.offset, run.length));
      grads[k].push_back(s.grad.narrow(0, run.offset, run.length));
      exp_avgs[k].push_back(s.exp_avg.narrow(0, run.offset, run.length));
      exp_avg_sqs[k].push_back(s.exp_avg_sq.narrow(0, run.offset, run.length));
    }
  // The kernel reads each tensor's step count (incremented by the caller, as torch.optim does).
  const auto count = torch::full({}, double(step), slices.front().param.options().dtype(torch::kFloat));
  for (int k = 0; k < 2; ++k) {
    if (params[k].empty()) continue;
    const std::vector<torch::Tensor> steps(params[k].size(), count);
    at::_fused_adamw_(params[k], grads[k], exp_avgs[k], exp_avg_sqs[k], {}, steps, lr,
                      config.beta1, config.beta2, k == 1 ? config.weight_decay : 0.0, config.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  }
}
#endif

}  // namespace

void adamw_update(std::vector<AdamWSlice>& slices, const OptimizerConfig& config, double lr,
                  int64_t step) {
  torch::NoGradGuard no_grad;
  if (slices.empty()) return;
#if TORCH_VERSION_MAJOR >= 2
  if (slices.front().param.is_cuda()) return fused_update(slices, config, lr, step);
#endif
  const double b1 = config.beta1, b2 = config.beta2;
  const double correction1 = 1 - std::pow(b1, double(step));
  const double correction2 = 1 - std::pow(b2, double(step));
  for (auto& s : slices) {
    if (config.weight_decay != 0)
      for (const auto& run : s.runs)
        if (run.decay) s.param.narrow(0, run.offset, run.length).mul_(1 - lr * config.weight_decay);
    s.exp_avg.mul_(b1).add_(s.grad, 1 - b1);
    s.exp_avg_sq.mul_(b2).addcmul_(s.grad, s.grad, 1 - b2);
    auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(correction2)).add_(config.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / correction1);
  }
}

}  // namespace trident
