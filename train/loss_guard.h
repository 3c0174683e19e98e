// The divergence guard: which training losses end a run. A loss that is not finite does, and so
// does a spike: a loss far above the run's recent level, as a robust statistic of the last
// `window` losses measures it (their median, and their spread as 1.4826 x the median absolute
// deviation, the standard deviation's robust estimate; at least 5% of the median and 0.01, so
// that a run whose recent losses are nearly equal, or nearly 0, still has room for noise):
//
//   spike  <=>  loss > median + max_spike x max(1.4826 x MAD, 0.05 x |median|, 0.01)
//
// checked from the second loss on (a resumed run brings its checkpoint's history; with one or
// two losses the floors decide: at max_spike 10, 1.5 times the level). A spike does not join the
// history. max_spike 0 turns the spike rule off. fp16's skipped steps are the loss scaler's
// business: they are neither checked nor recorded.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace trident {

class LossGuard {
 public:
  LossGuard(double max_spike, int64_t window);

  // Why `loss` ends the run ("the loss is nan", "the loss is 1.7e+12, a spike: ..."), or empty
  // when it does not; a loss that passes joins the history.
  std::string check(double loss);

  // The recent losses, oldest first, for a checkpoint to carry; restore() takes them back.
  std::vector<double> history() const { return {history_.begin(), history_.end()}; }
  void restore(const std::vector<double>& losses);

 private:
  double max_spike_;
  size_t window_;
  std::deque<double> history_;
};

// The warning for a fresh run's first loss far above ln(vocabulary), a uniform guess's loss, or
// not finite: weights initialized too large (naming model.init_method_std), or empty.
std::string first_loss_warning(double loss, int64_t vocab, double init_method_std);
// The warning for a learning rate far above what AdamW trains transformers at (naming
// optimizer.lr), or empty.
std::string learning_rate_warning(double lr);

}  // namespace trident
