// core/error.h: how failures are worded.
#include <gtest/gtest.h>

#include "core/error.h"

using namespace trident;

// A broken invariant names trident's file and line (relative to the source tree), the message
// and the condition, and is not mistaken for bad input.
TEST(Errors, CheckNamesTheFileLineAndCondition) {
  const int queued = 2;
  try {
    TRIDENT_CHECK(queued == 0, queued, " activations left in the queue");
    FAIL() << "no exception";
  } catch (const Error&) {
    FAIL() << "an internal error is not a trident::Error (bad input)";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()), "internal error at tests/test_errors.cpp:" + std::to_string(__LINE__ - 5) +
                                         ": 2 activations left in the queue (`queued == 0` is false)");
  }
  EXPECT_NO_THROW(TRIDENT_CHECK(queued == 2, "never shown"));
}

// A job-wide error is reported once, with the ranks that had each message.
TEST(Errors, JobErrorReportsEachMessageWithItsRanks) {
  const JobError all = JobError::everywhere("bad config", 4);
  EXPECT_EQ(all.report(), "error: bad config\n");
  EXPECT_EQ(std::string(all.what()), "bad config");
  const JobError some({{{1}, "shard corrupt"}, {{0, 2, 3}, "a peer failed"}}, 4);
  EXPECT_EQ(some.report(), "error (rank 1): shard corrupt\nerror (ranks 0, 2, 3): a peer failed\n");
  EXPECT_EQ(std::string(some.what()), "rank 1: shard corrupt; ranks 0, 2, 3: a peer failed");
}
