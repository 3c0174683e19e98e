// The divergence guard: which training losses end a run. A loss that is not finite does at once.
// A spike, a loss far above the run's recent level, does only when the loss does not come back:
// one hard sample gives one spike and the next loss is as before, while a diverging run, or one
// whose data turned to noise, stays high. The level is a robust statistic of the last `window`
// healthy losses (their median, and their spread as 1.4826 x the median absolute deviation, the
// standard deviation's robust estimate; at least 5% of the median and 0.01, so that a run whose
// recent losses are nearly equal, or nearly 0, still has room for noise):
//
//   spike  <=>  loss > median + max_spike x spread,  spread = max(1.4826 x MAD, 0.05 x |median|, 0.01)
//   back   <=>  loss <= median + max_spike / 3 x spread
//
//   losses:   ... 3.1 3.0 3.1 [5.7] 3.0 3.1 ...          a spike, then back: a warning, training goes on
//             ... 3.1 3.0 [7.5][6.9][5.7][5.6][5.6]     `patience` losses in a row from a spike on
//                                                        that are not back: diverged
//
// checked from the second loss on (a resumed run brings its checkpoint's history and the row it
// was in; with one or two losses the floors decide: at max_spike 10, 1.5 times the level). Only
// healthy losses join the history. max_spike 0 turns spikes off. fp16's skipped steps are the
// loss scaler's business: they are neither checked nor recorded.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace trident {

struct LossVerdict {
  enum class Kind { healthy, spike, diverged };
  Kind kind = Kind::healthy;
  std::string why;  // a spike's or a divergence's cause in words; empty when healthy
};

class LossGuard {
 public:
  LossGuard(double max_spike, int64_t window, int64_t patience);

  LossVerdict check(double loss);
  // The losses in a row from a spike on that were not back, as just checked (a diverging one
  // included): the run's last healthy loss was that many iterations ago.
  int64_t unhealthy_in_a_row() const { return int64_t(unhealthy_.size()); }

  // What a checkpoint carries to continue exactly: the recent healthy losses, oldest first, and
  // the unhealthy losses in a row since; restore() takes them back.
  std::vector<double> history() const { return {history_.begin(), history_.end()}; }
  std::vector<double> unhealthy_losses() const { return unhealthy_; }
  void restore(const std::vector<double>& history, const std::vector<double>& unhealthy = {});

 private:
  double max_spike_;
  size_t window_;
  size_t patience_;
  std::deque<double> history_;
  std::vector<double> unhealthy_;
};

// The warning for a fresh run's first loss far above ln(vocabulary), a uniform guess's loss, or
// not finite: weights initialized too large (naming model.init_method_std), or empty.
std::string first_loss_warning(double loss, int64_t vocab, double init_method_std);
// The warning for a learning rate far above what AdamW trains transformers at (naming
// optimizer.lr), or empty.
std::string learning_rate_warning(double lr);

}  // namespace trident
