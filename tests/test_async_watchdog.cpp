// The deadline for asynchronous communication (NCCL's), with operations and communicators
// simulated: what a GPU cannot show on demand (a peer that never answers) the CPU can.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "parallel/comm/async_watchdog.h"

using namespace trident;
using namespace std::chrono_literals;

namespace {

// Records the watchdog's failure instead of ending the process.
struct Recorder {
  std::mutex mutex;
  std::string why;
  std::atomic<int> failures{0};
  AsyncWatchdog::Failure failure() {
    return [this](const std::string& w) {
      std::lock_guard<std::mutex> lock(mutex);
      why = w;
      ++failures;
    };
  }
};

template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end)
    if (condition()) return true;
    else std::this_thread::sleep_for(5ms);
  return condition();
}

}  // namespace

// Completed operations leave the queue in whatever order they complete (a communication
// stream's may pass the compute stream's), releasing what their probes hold; nothing fails while
// they complete in time.
TEST(AsyncWatchdog, CompletedOperationsAreDroppedInAnyOrder) {
  Recorder recorder;
  AsyncWatchdog watchdog(10ms, recorder.failure());
  std::atomic<bool> first{false}, second{false};
  auto held = std::make_shared<int>(0);  // stands for what a probe holds (NCCL: its CUDA event)
  watchdog.watch("all_reduce", 60s, [&] { return first.load(); });
  watchdog.watch("all_gather", 60s, [&, held] { return second.load(); });
  EXPECT_EQ(held.use_count(), 2);
  second = true;
  EXPECT_TRUE(eventually([&] { return watchdog.pending() == 1; }));
  EXPECT_TRUE(eventually([&] { return held.use_count() == 1; }));
  first = true;
  EXPECT_TRUE(eventually([&] { return watchdog.pending() == 0; }));
  EXPECT_EQ(recorder.failures, 0);
}

// An operation a peer never completes: after its timeout every communicator is aborted and the
// failure names the operation and the deadline, once.
TEST(AsyncWatchdog, AStuckOperationAbortsEveryCommunicatorAfterItsTimeout) {
  Recorder recorder;
  AsyncWatchdog watchdog(10ms, recorder.failure());
  std::atomic<int> aborted{0};
  watchdog.add_communicator("NCCL rank 0 of 2", [] { return std::string(); }, [&] { ++aborted; });
  watchdog.add_communicator("NCCL rank 0 of 1", [] { return std::string(); }, [&] { ++aborted; });
  const auto start = std::chrono::steady_clock::now();
  watchdog.watch("NCCL all_reduce on the data-parallel group (rank 0)", 1s, [] { return false; });
  ASSERT_TRUE(eventually([&] { return recorder.failures > 0; }));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 1s);
  EXPECT_LT(waited, 3s);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(recorder.failures, 1);
  EXPECT_EQ(aborted, 2);
  std::lock_guard<std::mutex> lock(recorder.mutex);
  EXPECT_EQ(recorder.why,
            "NCCL all_reduce on the data-parallel group (rank 0) made no progress for 1 s (parallel.timeout_s): a peer "
            "is stopped, stuck or lost; aborted this rank's communicators, ending the job");
}

// A communicator's asynchronous error (a peer's connection lost) fails at once, named; a
// removed communicator is not aborted.
TEST(AsyncWatchdog, ACommunicatorErrorFailsAtOnce) {
  Recorder recorder;
  AsyncWatchdog watchdog(10ms, recorder.failure());
  std::atomic<bool> broken{false};
  std::atomic<int> aborted{0};
  const int64_t gone = watchdog.add_communicator("NCCL rank 1 of 4", [] { return std::string(); }, [&] { ++aborted; });
  watchdog.remove_communicator(gone);
  watchdog.add_communicator(
      "NCCL rank 1 of 2",
      [&] { return broken ? std::string("remote process exited or there was a network error") : std::string(); },
      [&] { ++aborted; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(recorder.failures, 0);
  broken = true;
  ASSERT_TRUE(eventually([&] { return recorder.failures > 0; }, 1000ms));
  EXPECT_EQ(aborted, 1);  // not the removed one
  std::lock_guard<std::mutex> lock(recorder.mutex);
  EXPECT_EQ(recorder.why, "NCCL rank 1 of 2 failed: remote process exited or there was a network error; aborted this "
                          "rank's communicators, ending the job");
}
