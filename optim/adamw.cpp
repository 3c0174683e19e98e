#include "optim/adamw.h"

namespace trident {

std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<torch::Tensor>& params,
                                                const OptimizerConfig& config) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(config.lr)
            .betas({config.beta1, config.beta2})
            .eps(config.eps)
            .weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(config.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(std::move(groups),
                                               torch::optim::AdamWOptions(config.lr));
}

void set_learning_rate(torch::optim::AdamW& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

}  // namespace trident
