// Learning rate of an iteration: linear warm-up, then cosine / linear / constant decay to min_lr.
#pragma once

#include <cstdint>

#include "core/config.h"

namespace trident {

// `iteration` counts from 1. Warm-up reaches optimizer.lr at warmup_iters; decay ends at
// decay_iters (train.iters when 0) and min_lr holds after it (Megatron's schedule).
double learning_rate(const OptimizerConfig& optimizer, int64_t iteration, int64_t train_iters);

}  // namespace trident
