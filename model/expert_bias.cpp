#include "model/expert_bias.h"

#include "core/error.h"

namespace trident {

ExpertBias::ExpertBias(int64_t layers, int64_t experts, double rate)
    : layers_(layers), experts_(experts), rate_(rate), bias_(torch::zeros({layers, experts}, torch::kDouble)) {}

torch::Tensor ExpertBias::of_layer(int64_t layer, const torch::Device& device) {
  TRIDENT_CHECK(layer >= 0 && layer < layers_, "layer ", layer, " of ", layers_);
  if (bias_.device() != device) bias_ = bias_.to(device);
  return bias_[layer];
}

void ExpertBias::update(const torch::Tensor& counts) {
  TRIDENT_CHECK(counts.dim() == 2 && counts.size(0) == layers_ && counts.size(1) == experts_ + 1, "load counts ",
                counts.sizes(), " for ", layers_, " layers of ", experts_, " experts");
  torch::NoGradGuard no_grad;
  const torch::Tensor load = counts.narrow(1, 0, experts_).to(bias_.device(), torch::kDouble);
  // sign(mean - load): +1 under the mean, -1 over it, 0 at it (and for a layer without tokens).
  bias_ += rate_ * (load.mean(1, /*keepdim=*/true) - load).sign();
}

std::vector<double> ExpertBias::values() const {
  const torch::Tensor host = bias_.to(torch::kCPU).contiguous();
  return {host.data_ptr<double>(), host.data_ptr<double>() + host.numel()};
}

void ExpertBias::restore(const std::vector<double>& values) {
  TRIDENT_CHECK(int64_t(values.size()) == layers_ * experts_, values.size(), " expert biases for ", layers_,
                " layers of ", experts_, " experts");
  bias_ = torch::tensor(values, torch::kDouble).view({layers_, experts_}).to(bias_.device());
}

}  // namespace trident
