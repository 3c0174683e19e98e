#include "model/expert_load.h"

#include "core/error.h"

namespace trident {

ExpertLoad::ExpertLoad(int64_t layers, int64_t experts) : layers_(layers), experts_(experts) {}

void ExpertLoad::begin_iteration() {
  if (counts_.defined()) counts_.zero_();
}

void ExpertLoad::record(int64_t layer, const torch::Tensor& taken, const torch::Tensor& dropped) {
  TRIDENT_CHECK(layer >= 0 && layer < layers_ && taken.numel() == experts_ && dropped.numel() == 1, "layer ", layer,
                " of ", layers_, ": ", taken.numel(), " counts for ", experts_, " experts");
  torch::NoGradGuard no_grad;
  if (!counts_.defined())
    counts_ = torch::zeros({layers_, experts_ + 1}, torch::TensorOptions().dtype(torch::kDouble).device(taken.device()));
  counts_[layer].narrow(0, 0, experts_) += taken.to(torch::kDouble);
  counts_[layer][experts_] += dropped.to(torch::kDouble).reshape({});
}

}  // namespace trident
