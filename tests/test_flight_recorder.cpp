// parallel/comm/flight_recorder.h: a failing rank's record, and who of its group was behind.
#include <gtest/gtest.h>

#include <fstream>

#include "core/files.h"
#include "parallel/comm/flight_recorder.h"
#include "tests/helpers.h"

using namespace trident;
using trident::testing::scratch_dir;

// Rank 0 times out in the 5th operation of a group of three: rank 1's record says it is at the
// 4th, rank 2 left none. The verdict names both; the record rank 0 wrote lists the operation.
TEST(FlightRecorder, AFailureNamesTheRanksBehindAndTheSilentOnes) {
  const auto dir = scratch_dir();
  FlightRecorder& recorder = FlightRecorder::process();
  recorder.keep_records_in(dir.string(), "job7", 0);
  const std::string group = "data-parallel[0,1,2]";
  for (int64_t sequence = 1; sequence <= 4; ++sequence)
    recorder.finished(recorder.started(group, sequence, "all_reduce", 4096), 0.25);
  recorder.started(group, 5, "all_reduce", 4096);
  std::ofstream(dir / "flight-job7-rank-1.txt") << "last " << group << " 4 all_reduce finished\n";

  const std::string verdict = recorder.explain_failure(std::chrono::seconds(1));
  recorder.keep_records_in("", "", 0);
  EXPECT_EQ(verdict, "this rank was in #5 all_reduce on " + group + "; behind: rank 1 (at #4 all_reduce, finished); "
                     "rank 2 left no flight record within 1 s: stopped, stuck outside communication, or cut off "
                     "(flight records in " + dir.string() + ")");
  const std::string record = read_text_file((dir / "flight-job7-rank-0.txt").string(), "record");
  EXPECT_EQ(record.rfind("last " + group + " 5 all_reduce in-flight\nentry 1 all_reduce " + group + " 4096 ", 0), 0u)
      << record;
  EXPECT_NE(record.find("entry 5 all_reduce " + group + " 4096 "), std::string::npos) << record;
  EXPECT_EQ(record.substr(record.size() - 2), "-\n") << record;  // the 5th has not ended
  EXPECT_GE(recorder.blocked_seconds(), 1.0);
}

// After a cut link a peer may still wait in an earlier operation (its last bytes lost): it looks
// behind, but it does not answer from here, so it is named unreachable, with where it was. A peer
// behind that answers (127.0.0.1 refuses at once) is behind. The lost host is not an address at
// all, so that its probe fails on every machine (a sandbox may answer for any IPv4 address).
TEST(FlightRecorder, APeerThatDoesNotAnswerIsUnreachableEvenWhenBehind) {
  const auto dir = scratch_dir();
  FlightRecorder& recorder = FlightRecorder::process();
  recorder.keep_records_in(dir.string(), "job8", 0);
  const std::string group = "world[0,1,2,3]";
  recorder.started(group, 7, "all_reduce", 64);
  std::ofstream(dir / "flight-job8-rank-1.txt") << "address lost-host\nlast " << group << " 6 all_reduce finished\n";
  std::ofstream(dir / "flight-job8-rank-2.txt") << "address 127.0.0.1\nlast " << group << " 6 all_reduce in-flight\n";
  std::ofstream(dir / "flight-job8-rank-3.txt") << "address lost-host\nlast " << group << " 7 all_reduce in-flight\n";

  const std::string verdict = recorder.explain_failure(std::chrono::seconds(1));
  recorder.keep_records_in("", "", 0);
  EXPECT_EQ(verdict, "this rank was in #7 all_reduce on " + group + "; unreachable from this rank: rank 1 "
                     "(lost-host, at #6 all_reduce, finished), rank 3 (lost-host); behind: rank 2 (at #6 all_reduce, "
                     "in-flight) (flight records in " + dir.string() + ")");
}

// Without a folder nothing is written and nothing is said.
TEST(FlightRecorder, WithoutAFolderThereIsNoRecord) {
  FlightRecorder& recorder = FlightRecorder::process();
  recorder.keep_records_in("", "", 0);
  recorder.started("world[0,1]", 1, "barrier", 0);
  EXPECT_EQ(recorder.explain_failure(std::chrono::seconds(1)), "");
}

// The first rank to fail claims the job's error; a rank that fails the same way after it (numbers
// aside) stays silent, a different cause is said.
TEST(FlightRecorder, OnlyTheFirstRankReportsACauseTheOthersShare) {
  const auto dir = scratch_dir();
  FlightRecorder& recorder = FlightRecorder::process();
  recorder.keep_records_in(dir.string(), "job9", 1);
  EXPECT_TRUE(recorder.first_to_report("token id 250 at position 17 of 'corpus'"));
  recorder.keep_records_in(dir.string(), "job9", 2);
  EXPECT_FALSE(recorder.first_to_report("token id 250 at position 4131 of 'corpus'"));
  EXPECT_TRUE(recorder.first_to_report("a peer closed its connection"));
  recorder.keep_records_in(dir.string(), "job9", 0);  // a new run of the job: rank 0 clears the claim
  EXPECT_TRUE(recorder.first_to_report("token id 250 at position 4131 of 'corpus'"));
  recorder.keep_records_in("", "", 0);
  EXPECT_TRUE(recorder.first_to_report("anything"));  // no folder: every rank speaks
}
