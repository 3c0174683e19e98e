#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/loss_guard.h"

using namespace trident;

namespace {

// Losses around 3.0 with noise of +-0.02: the spread floor (5% of the median, 0.15) applies.
LossGuard noisy_history(double max_spike, int64_t window = 100) {
  LossGuard guard(max_spike, window);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(guard.check(3.0 + (i % 2 ? 0.02 : -0.02)), "");
  return guard;
}

}  // namespace

// A loss far above the recent median is a spike; noise, a falling loss and a rise within the
// rule are not. The message says by how much and names the knob.
TEST(LossGuard, AFarAboveTheRecentLevelIsASpike) {
  LossGuard guard = noisy_history(10);
  EXPECT_EQ(guard.check(2.5), "");  // falling: never a spike
  EXPECT_EQ(guard.check(4.4), "");  // median 3.0 (about) + 10 x 0.15 = 4.5
  const std::string why = guard.check(1.7e12);
  EXPECT_EQ(why.rfind("the loss is 1.7e+12, a spike: ", 0), 0u) << why;
  EXPECT_NE(why.find(" spreads of 0.1500 above the median 3.0000 of the last 22 iterations (train.max_loss_spike=10)"),
            std::string::npos) << why;
  // A spike does not join the history: the next one is judged by the same level.
  EXPECT_EQ(guard.history().size(), 22u);
  EXPECT_NE(guard.check(5.0), "");
}

// A wide recent spread (a noisy run) widens the rule: 1.4826 x the median absolute deviation.
TEST(LossGuard, TheSpreadIsTheRecentLossesOwn) {
  auto wide = [] {
    LossGuard guard(10, 100);
    std::vector<double> losses;
    for (int i = 0; i < 20; ++i) losses.push_back(i % 2 ? 4.0 : 2.0);  // median 3, MAD 1
    guard.restore(losses);
    return guard;
  };
  EXPECT_EQ(wide().check(17.0), "");  // 3 + 10 x 1.4826 = 17.8
  EXPECT_NE(wide().check(18.0), "");
}

// Not finite is always divergence; from the second loss on the floors judge a short history (at
// k = 10: 1.5 times the level; near 0, 0.1 above it); the spike rule can be off.
TEST(LossGuard, NanAlwaysStopsSpikesFromTheSecondLossAndCanBeOff) {
  LossGuard fresh(10, 100);
  EXPECT_EQ(fresh.check(std::nan("")), "the loss is nan");
  EXPECT_EQ(fresh.check(std::numeric_limits<double>::infinity()), "the loss is inf");
  EXPECT_EQ(fresh.check(3.0), "");  // nothing to judge it by
  EXPECT_EQ(fresh.check(3.1), "");  // 3.0 + 10 x 0.15 = 4.5
  EXPECT_NE(fresh.check(4.6), "");  // median 3.05 + 10 x 0.1525 = 4.575
  LossGuard near_zero(10, 100);
  near_zero.restore({0, 0, 0});
  EXPECT_EQ(near_zero.check(0.09), "");
  EXPECT_EQ(near_zero.check(0.2).rfind("the loss is 0.2, a spike: 20 spreads of 0.0100 above the median 0.0000", 0), 0u);
  LossGuard off = noisy_history(0);
  EXPECT_EQ(off.check(1e12), "");
  EXPECT_EQ(off.check(std::nan("")), "the loss is nan");
}

// The history keeps the last `window` losses and travels with a checkpoint (restore).
TEST(LossGuard, TheHistoryIsTheLastWindowAndRestores) {
  LossGuard guard(10, 5);
  for (int i = 8; i >= 1; --i) EXPECT_EQ(guard.check(double(i)), "");  // a falling loss is never a spike
  EXPECT_EQ(guard.history(), (std::vector<double>{5, 4, 3, 2, 1}));
  LossGuard resumed(10, 3);
  resumed.restore(guard.history());
  EXPECT_EQ(resumed.history(), (std::vector<double>{3, 2, 1}));
  EXPECT_NE(resumed.check(100.0), "");
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
