#include "parallel/comm/watchdog.h"

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "parallel/comm/flight_recorder.h"

namespace trident {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(250);

class Watchdog {
 public:
  // Never destroyed, its thread never joined: the process may exit (or end in a watched call)
  // at any moment, and nothing here must run after the rest is torn down.
  static Watchdog& instance() {
    static Watchdog* watchdog = new Watchdog;
    return *watchdog;
  }

  void arm(const std::string& what, std::chrono::seconds timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    TRIDENT_CHECK(!armed_, "'", what, "' started inside the watched call '", what_, "'");
    armed_ = true;
    what_ = what;
    timeout_ = timeout;
    deadline_ = Clock::now() + timeout;
  }

  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  Watchdog() { std::thread([this] { loop(); }).detach(); }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      never_.wait_for(lock, kTick);
      if (armed_ && Clock::now() > deadline_) {
        const std::string behind = FlightRecorder::process().explain_failure(FlightRecorder::kPeersWait);
        log::error(str(what_, " made no progress for ", timeout_.count(),
                       " s (parallel.timeout_s): a peer is stopped, stuck or lost; ending the job",
                       behind.empty() ? "" : "; ", behind));
        // Not end_job(): only the main thread may call MPI. A rank that exits without
        // finalizing makes mpirun end the job.
        std::_Exit(2);
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable never_;  // the thread only sleeps on it
  bool armed_ = false;
  std::string what_;
  std::chrono::seconds timeout_{0};
  Clock::time_point deadline_;
};

}  // namespace

CallWatch::CallWatch(const std::string& what, std::chrono::seconds timeout) {
  Watchdog::instance().arm(what, timeout);
}

CallWatch::~CallWatch() { Watchdog::instance().disarm(); }

}  // namespace trident
