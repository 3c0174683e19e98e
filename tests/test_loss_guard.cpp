#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "train/loss_guard.h"

using namespace trident;

namespace {

using Kind = LossVerdict::Kind;

// Each check one iteration after the one before (the iteration only dates a row of unhealthy
// losses: LossGuard.ARowIsDatedByItsFirstLoss).
int64_t last_iteration = 0;
LossVerdict check(LossGuard& guard, double loss) { return guard.check(loss, ++last_iteration); }
LossVerdict check(LossGuard&& guard, double loss) { return check(guard, loss); }

// Losses around 3.0 with noise of +-0.02: the spread floor (5% of the median, 0.15) applies.
LossGuard noisy_history(double max_spike, int64_t window = 100, int64_t patience = 5) {
  LossGuard guard(max_spike, window, patience);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(check(guard, 3.0 + (i % 2 ? 0.02 : -0.02)).kind, Kind::healthy);
  return guard;
}

}  // namespace

// A loss far above the recent median is a spike; noise and a falling loss are not. The message
// says by how much, names the knobs, and that the run goes on. A loss more than a third of the
// way to a spike is high: no word, but not healthy either.
TEST(LossGuard, AFarAboveTheRecentLevelIsASpike) {
  LossGuard guard = noisy_history(10);
  EXPECT_EQ(check(guard, 2.5).kind, Kind::healthy);   // falling: never a spike
  EXPECT_EQ(check(guard, 3.4).kind, Kind::healthy);  // median 2.98 + 10 / 3 x 0.149 = 3.48, after 2.5
  const LossVerdict spike = check(guard, 1.7e12);
  EXPECT_EQ(spike.kind, Kind::spike);
  EXPECT_EQ(spike.why.rfind("the loss is 1.7e+12, a spike: ", 0), 0u) << spike.why;
  EXPECT_NE(spike.why.find(" spreads of 0.1500 above the median 3.0000 of the last 22 healthy iterations; going on, "
                           "and stopping unless a loss within 3.3 spreads of the median comes in the next 4 "
                           "iterations (train.max_loss_spike=10, train.loss_spike_patience=5)"),
            std::string::npos)
      << spike.why;
  // Neither joins the history; a high loss is judged by the same level and says nothing.
  EXPECT_EQ(guard.history().size(), 22u);
  const LossVerdict high = check(guard, 3.6);
  EXPECT_EQ(high.kind, Kind::high);
  EXPECT_EQ(high.why, "");
  EXPECT_EQ(int64_t(guard.unhealthy_losses().size()), 2);
  EXPECT_EQ(check(guard, 3.4).kind, Kind::healthy);  // back
  EXPECT_EQ(int64_t(guard.unhealthy_losses().size()), 0);
  EXPECT_EQ(guard.history().size(), 23u);
}

// One hard sample, or a few apart, never stops a run: a loss that comes back ends the row.
TEST(LossGuard, SpikesThatComeBackNeverStopTheRun) {
  LossGuard guard = noisy_history(10, 100, 3);
  for (int round = 0; round < 50; ++round) {
    EXPECT_EQ(check(guard, 5.7).kind, Kind::spike);
    EXPECT_EQ(check(guard, 3.9).kind, Kind::high);
    EXPECT_EQ(check(guard, 3.0).kind, Kind::healthy);
    EXPECT_EQ(int64_t(guard.unhealthy_losses().size()), 0);
  }
  EXPECT_EQ(guard.history().size(), 70u);  // the spikes and high losses are not in it
}

// `patience` high losses in a row are a divergence: a run gone unstable, whose loss stays above
// the spike threshold, or one whose data turned to noise, whose loss settles at a uniform
// guess's, far above the level before but under the spike threshold. The cause lists them.
TEST(LossGuard, ALossThatDoesNotComeBackIsADivergence) {
  LossGuard guard = noisy_history(10, 100, 3);
  EXPECT_EQ(check(guard, 7.5).kind, Kind::spike);
  EXPECT_EQ(check(guard, 5.6).kind, Kind::spike);
  const LossVerdict verdict = check(guard, 5.55);
  EXPECT_EQ(verdict.kind, Kind::diverged);
  EXPECT_EQ(verdict.why, "the loss did not come back: 3 losses in a row (7.5000, 5.6000, 5.5500) were more than 3.3 "
                         "spreads above the level, the last 17.0 spreads of 0.1500 above the median 3.0000 of the "
                         "last 20 healthy iterations (train.max_loss_spike=10, train.loss_spike_patience=3)");
  EXPECT_EQ(int64_t(guard.unhealthy_losses().size()), 3);
  LossGuard shifted = noisy_history(10, 100, 3);  // 6.7 spreads above, never a spike
  EXPECT_EQ(check(shifted, 4.0).kind, Kind::high);
  EXPECT_EQ(check(shifted, 4.0).kind, Kind::high);
  EXPECT_EQ(check(shifted, 4.0).kind, Kind::diverged);
  // With patience 1 the first high loss stops the run.
  EXPECT_EQ(check(noisy_history(10, 100, 1), 3.6).kind, Kind::diverged);
}

// A wide recent spread (a noisy run) widens the rule: 1.4826 x the median absolute deviation.
TEST(LossGuard, TheSpreadIsTheRecentLossesOwn) {
  auto wide = [] {
    LossGuard guard(10, 100, 5);
    std::vector<double> losses;
    for (int i = 0; i < 20; ++i) losses.push_back(i % 2 ? 4.0 : 2.0);  // median 3, MAD 1
    guard.restore(losses);
    return guard;
  };
  EXPECT_EQ(check(wide(), 7.9).kind, Kind::healthy);  // 3 + 10 / 3 x 1.4826 = 7.94
  EXPECT_EQ(check(wide(), 17.0).kind, Kind::high);    // 3 + 10 x 1.4826 = 17.8
  EXPECT_EQ(check(wide(), 18.0).kind, Kind::spike);
}

// Not finite is always divergence, high losses before it or not; from the second loss on the
// floors judge a short history (at k = 10: a spike at 1.5 times the level; near 0, 0.1 above
// it); the rule can be off.
TEST(LossGuard, NanAlwaysStopsSpikesFromTheSecondLossAndCanBeOff) {
  LossGuard fresh(10, 100, 5);
  EXPECT_EQ(check(fresh, std::nan("")).why, "the loss is nan");
  EXPECT_EQ(check(fresh, std::numeric_limits<double>::infinity()).why, "the loss is inf");
  EXPECT_EQ(check(fresh, 3.0).kind, Kind::healthy);  // nothing to judge it by
  EXPECT_EQ(check(fresh, 3.1).kind, Kind::healthy);  // 3.0 + 10 / 3 x 0.15 = 3.5
  EXPECT_EQ(check(fresh, 4.5).kind, Kind::high);     // median 3.05 + 10 x 0.1525 = 4.575
  EXPECT_EQ(check(fresh, 4.6).kind, Kind::spike);
  LossGuard near_zero(10, 100, 1);
  near_zero.restore({0, 0, 0});
  EXPECT_EQ(check(near_zero, 0.03).kind, Kind::healthy);
  EXPECT_NE(check(near_zero, 0.2).why.find("the last 20.0 spreads of 0.0100 above the median 0.0000"), std::string::npos);
  LossGuard patient = noisy_history(10);
  EXPECT_EQ(check(patient, 6.0).kind, Kind::spike);
  EXPECT_EQ(check(patient, std::nan("")).kind, Kind::diverged);
  EXPECT_EQ(int64_t(patient.unhealthy_losses().size()), 2);
  LossGuard off = noisy_history(0);
  EXPECT_EQ(check(off, 1e12).kind, Kind::healthy);
  EXPECT_EQ(check(off, std::nan("")).why, "the loss is nan");
}

// The history keeps the last `window` healthy losses; it and the high losses in a row since
// travel with a checkpoint (restore), so that a resumed run judges as the uninterrupted one would.
TEST(LossGuard, TheHistoryIsTheLastWindowAndRestores) {
  LossGuard guard(10, 5, 3);
  for (int i = 8; i >= 1; --i) EXPECT_EQ(check(guard, double(i)).kind, Kind::healthy);  // falling: never high
  EXPECT_EQ(guard.history(), (std::vector<double>{5, 4, 3, 2, 1}));
  EXPECT_EQ(check(guard, 100.0).kind, Kind::spike);
  EXPECT_EQ(check(guard, 101.0).kind, Kind::spike);
  LossGuard resumed(10, 3, 3);
  resumed.restore(guard.history(), guard.unhealthy_losses(), guard.first_unhealthy());
  EXPECT_EQ(resumed.history(), (std::vector<double>{3, 2, 1}));
  EXPECT_EQ(resumed.unhealthy_losses(), (std::vector<double>{100, 101}));
  EXPECT_EQ(check(resumed, 100.0).kind, Kind::diverged);
}

// A row of unhealthy losses is dated by its first loss, whichever iterations between were not
// checked (fp16's skipped steps), and travels with a checkpoint; a healthy loss ends it.
TEST(LossGuard, ARowIsDatedByItsFirstLoss) {
  LossGuard guard = noisy_history(10);
  EXPECT_EQ(guard.first_unhealthy(), -1);
  EXPECT_EQ(guard.check(5.7, 30).kind, Kind::spike);
  EXPECT_EQ(guard.first_unhealthy(), 30);
  EXPECT_EQ(guard.check(3.9, 33).kind, Kind::high);  // 31 and 32 skipped
  EXPECT_EQ(guard.first_unhealthy(), 30);
  LossGuard resumed(10, 100, 5);
  resumed.restore(guard.history(), guard.unhealthy_losses(), guard.first_unhealthy());
  EXPECT_EQ(resumed.check(std::nan(""), 36).kind, Kind::diverged);
  EXPECT_EQ(resumed.first_unhealthy(), 30);
  EXPECT_EQ(guard.check(3.0, 34).kind, Kind::healthy);
  EXPECT_EQ(guard.first_unhealthy(), -1);
  EXPECT_EQ(guard.check(std::nan(""), 35).kind, Kind::diverged);
  EXPECT_EQ(guard.first_unhealthy(), 35);
  EXPECT_THROW(resumed.restore({3.0}, {5.0}, -1), InternalError);  // a row without its date
}

// Settings that make training meaningless are named: weights so large the first loss is far
// above a uniform guess's, a learning rate far above AdamW's range.
TEST(LossGuard, MeaninglessSettingsAreNamed) {
  EXPECT_EQ(first_loss_warning(7.7, 2048, 0.02), "");  // ln 2048 = 7.62
  EXPECT_EQ(first_loss_warning(std::nan(""), 2048, 1e6).rfind("the first loss, nan, is not even finite", 0), 0u);
  const std::string big = first_loss_warning(3e7, 2048, 1e6);
  EXPECT_EQ(big.rfind("the first loss, 3e+07, is far above ln(vocabulary) = 7.62, a uniform guess's: the initial "
                      "weights are far too large (model.init_method_std=1e+06; GPT-2 and Llama use 0.02)", 0), 0u)
      << big;
  EXPECT_EQ(learning_rate_warning(6e-4), "");
  EXPECT_NE(learning_rate_warning(1e6).find("optimizer.lr=1e+06 is far above what AdamW trains transformers at"),
            std::string::npos);
}
