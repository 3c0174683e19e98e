#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace trident {

double learning_rate(const OptimizerConfig& o, int64_t iteration, int64_t train_iters) {
  if (o.warmup_iters > 0 && iteration <= o.warmup_iters)
    return o.lr * double(iteration) / double(o.warmup_iters);
  if (o.decay_style == DecayStyle::constant) return o.lr;
  const int64_t decay_end = o.decay_iters > 0 ? o.decay_iters : train_iters;
  if (iteration >= decay_end) return o.min_lr;
  const double progress =
      double(iteration - o.warmup_iters) / double(std::max<int64_t>(1, decay_end - o.warmup_iters));
  const double factor = o.decay_style == DecayStyle::cosine ? 0.5 * (1.0 + std::cos(M_PI * progress))
                                                  : 1.0 - progress;
  return o.min_lr + (o.lr - o.min_lr) * factor;
}

}  // namespace trident
