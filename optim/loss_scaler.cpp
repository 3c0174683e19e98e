#include "optim/loss_scaler.h"

#include <algorithm>

namespace trident {

LossScaler::LossScaler(const LossScaleConfig& config, Precision precision)
    : config_(config), dynamic_(precision == Precision::fp16), scale_(dynamic_ ? config.initial : 1.0) {}

bool LossScaler::update(bool finite) {
  if (!dynamic_) return true;  // unscaled: a non-finite gradient is the model's own problem
  if (!finite) {
    ++skipped_;
    ++skipped_in_a_row_;
    good_steps_ = 0;
    scale_ = std::max(config_.min, scale_ / 2);
    return false;
  }
  skipped_in_a_row_ = 0;
  if (++good_steps_ == config_.window) {
    good_steps_ = 0;
    scale_ *= 2;
  }
  return true;
}

void LossScaler::restore(const State& state) {
  scale_ = state.scale;
  good_steps_ = state.good_steps;
  skipped_ = state.skipped;
}

}  // namespace trident
