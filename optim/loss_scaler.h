// Dynamic loss scaling for fp16 (Micikevicius et al. 2018, as Megatron does it): the loss is
// multiplied by `scale` before backward; a step whose gradients hold inf or nan is skipped and
// the scale halves (not below loss_scale.min); after loss_scale.window good steps in a row it
// doubles. bf16, fp32 and fp64 need none: their scale stays 1 and no step is ever skipped.
#pragma once

#include <cstdint>

#include "core/config.h"

namespace trident {

class LossScaler {
 public:
  // Dynamic for fp16; every other precision trains unscaled.
  LossScaler(const LossScaleConfig& config, Precision precision);
  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Records one step's outcome (`finite`: its gradients were all finite) and returns whether
  // the optimizer should step.
  bool update(bool finite);
  int64_t skipped() const { return skipped_; }
  // Skipped steps since the last good one.
  int64_t skipped_in_a_row() const { return skipped_in_a_row_; }

  // What a checkpoint keeps so that a resumed run continues exactly.
  struct State {
    double scale;
    int64_t good_steps, skipped;
  };
  State state() const { return {scale_, good_steps_, skipped_}; }
  void restore(const State& state);

 private:
  LossScaleConfig config_;
  bool dynamic_;
  double scale_;
  int64_t good_steps_ = 0, skipped_ = 0, skipped_in_a_row_ = 0;
};

}  // namespace trident
