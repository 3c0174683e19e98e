// The divergence guard: which training losses end a run. A loss that is not finite does at once.
// A spike, a loss far above the run's recent level, does not: one hard sample gives one spike
// and the next loss is as before. What ends a run is a loss that stays high: a run gone unstable,
// or one whose data turned to noise (whose loss may settle below the spike threshold, at a
// uniform guess's, yet far above the level before). The level is a robust statistic of the last
// `window` healthy losses (their median, and their spread as 1.4826 x the median absolute
// deviation, the standard deviation's robust estimate; at least 5% of the median and 0.01, so
// that a run whose recent losses are nearly equal, or nearly 0, still has room for noise):
//
//   spread = max(1.4826 x MAD, 0.05 x |median|, 0.01)
//   high   <=>  loss > median + max_spike / 3 x spread     (about 2% of healthy losses)
//   spike  <=>  loss > median + max_spike x spread         (about 0.1%: a warning)
//   diverged <=> `patience` high losses in a row
//
//   losses:   ... 3.1 3.0 3.1 [5.7] 3.0 3.1 ...           a spike, then back: training goes on
//             ... 3.1 3.0 [7.5] [6.9] [5.7] [5.6] [5.6]   5 high losses in a row: diverged
//
// checked from the second loss on (a resumed run brings its checkpoint's history and the row it
// was in; with one or two losses the floors decide: at max_spike 10, 1.5 times the level). Only
// healthy losses join the history. max_spike 0 turns all but the non-finite rule off. fp16's
// skipped steps are the loss scaler's business: they are neither checked nor recorded, so a row
// is known by the iteration of its first loss, not by its length.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace trident {

struct LossVerdict {
  // high: more than max_spike / 3 spreads above the level, not yet a spike: no word, but not
  // healthy either (it extends a row, and does not join the history).
  enum class Kind { healthy, high, spike, diverged };
  Kind kind = Kind::healthy;
  std::string why;  // a spike's or a divergence's cause in words; empty when healthy
};

class LossGuard {
 public:
  LossGuard(double max_spike, int64_t window, int64_t patience);

  // The verdict on `iteration`'s loss (iterations checked in increasing order).
  LossVerdict check(double loss, int64_t iteration);
  // The iteration of the first of the unhealthy losses in a row just checked (a diverging one
  // included), -1 when the last loss was healthy: the weights before it are the newest known good.
  int64_t first_unhealthy() const { return unhealthy_.empty() ? -1 : first_unhealthy_; }

  // What a checkpoint carries to continue exactly: the recent healthy losses, oldest first, the
  // unhealthy losses in a row since and the iteration of the first of them; restore() takes them
  // back.
  std::vector<double> history() const { return {history_.begin(), history_.end()}; }
  std::vector<double> unhealthy_losses() const { return unhealthy_; }
  void restore(const std::vector<double>& history, const std::vector<double>& unhealthy = {},
               int64_t first_unhealthy = -1);

 private:
  double max_spike_;
  size_t window_;
  size_t patience_;
  std::deque<double> history_;
  std::vector<double> unhealthy_;
  int64_t first_unhealthy_ = -1;
};

// The warning for a fresh run's first loss far above ln(vocabulary), a uniform guess's loss, or
// not finite: weights initialized too large (naming model.init_method_std), or empty.
std::string first_loss_warning(double loss, int64_t vocab, double init_method_std);
// The warning for a learning rate far above what AdamW trains transformers at (naming
// optimizer.lr), or empty.
std::string learning_rate_warning(double lr);

}  // namespace trident
