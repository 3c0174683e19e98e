#include "train/loss_guard.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/text.h"

namespace trident {
namespace {

double median(std::vector<double> values) {
  const size_t half = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(half), values.end());
  const double upper = values[half];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + std::ptrdiff_t(half)) + upper) / 2;
}

}  // namespace

LossGuard::LossGuard(double max_spike, int64_t window, int64_t patience)
    : max_spike_(max_spike), window_(size_t(window)), patience_(size_t(patience)) {
  TRIDENT_CHECK(max_spike >= 0 && window >= 1 && patience >= 1, "loss guard: max_spike ", max_spike, ", window ",
                window, ", patience ", patience);
}

LossVerdict LossGuard::check(double loss, int64_t iteration) {
  const auto unhealthy = [&] {
    if (unhealthy_.empty()) first_unhealthy_ = iteration;
    unhealthy_.push_back(loss);
  };
  if (!std::isfinite(loss)) {
    unhealthy();
    return {LossVerdict::Kind::diverged, str("the loss is ", loss)};
  }
  if (max_spike_ > 0 && !history_.empty()) {
    const std::vector<double> recent(history_.begin(), history_.end());
    const double level = median(recent);
    std::vector<double> deviations;
    for (double x : recent) deviations.push_back(std::abs(x - level));
    const double spread = std::max({1.4826 * median(deviations), 0.05 * std::abs(level), 0.01});
    const double high = max_spike_ / 3;  // a loss this many spreads above the level is not healthy
    const double spreads = (loss - level) / spread;
    if (spreads > high) {
      unhealthy();
      const std::string above = str(fixed(spreads, 1), " spreads of ", fixed(spread, 4), " above the median ",
                                    fixed(level, 4), " of the last ", recent.size(), " healthy iterations");
      const std::string rule = str("train.max_loss_spike=", max_spike_, ", train.loss_spike_patience=", patience_);
      if (unhealthy_.size() >= patience_) {
        std::string losses;
        for (double bad : unhealthy_) losses += (losses.empty() ? "" : ", ") + fixed(bad, 4);
        return {LossVerdict::Kind::diverged,
                str("the loss did not come back: ", unhealthy_.size(), " losses in a row (", losses, ") were more than ",
                    fixed(high, 1), " spreads above the level, the last ", above, " (", rule, ")")};
      }
      if (spreads <= max_spike_) return {LossVerdict::Kind::high, ""};
      return {LossVerdict::Kind::spike,
              str("the loss is ", loss, ", a spike: ", above, "; going on, and stopping unless a loss within ",
                  fixed(high, 1), " spreads of the median comes in the next ", patience_ - unhealthy_.size(),
                  " iterations (", rule, ")")};
    }
  }
  unhealthy_.clear();
  history_.push_back(loss);
  if (history_.size() > window_) history_.pop_front();
  return {};
}

void LossGuard::restore(const std::vector<double>& history, const std::vector<double>& unhealthy,
                        int64_t first_unhealthy) {
  TRIDENT_CHECK(unhealthy.empty() == (first_unhealthy < 0), "loss guard: ", unhealthy.size(),
                " unhealthy losses from iteration ", first_unhealthy);
  history_.clear();
  for (double loss : history) {
    history_.push_back(loss);
    if (history_.size() > window_) history_.pop_front();
  }
  unhealthy_ = unhealthy;
  first_unhealthy_ = first_unhealthy;
}

std::string first_loss_warning(double loss, int64_t vocab, double init_method_std) {
  const double uniform = std::log(double(vocab));
  if (std::isfinite(loss) && loss <= 2 * uniform) return "";
  return str("the first loss, ", loss, ", is ", std::isfinite(loss) ? "far above" : "not even finite, let alone near",
             " ln(vocabulary) = ", fixed(uniform, 2), ", a uniform guess's: the initial weights are far too large ",
             "(model.init_method_std=", init_method_std, "; GPT-2 and Llama use 0.02)");
}

std::string learning_rate_warning(double lr) {
  if (lr <= 0.1) return "";
  return str("optimizer.lr=", lr, " is far above what AdamW trains transformers at (1e-5 to 1e-2; GPT-2 small ",
             "6e-4): expect the loss to spike or diverge");
}

}  // namespace trident
