#include "parallel/comm/async_watchdog.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/logging.h"
#include "parallel/comm/flight_recorder.h"

namespace trident {

AsyncWatchdog::AsyncWatchdog(std::chrono::milliseconds tick, Failure failure)
    : tick_(tick), failure_(std::move(failure)), thread_([this] { loop(); }) {}

AsyncWatchdog::~AsyncWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int64_t AsyncWatchdog::add_communicator(std::string name, std::function<std::string()> error,
                                        std::function<void()> abort) {
  std::lock_guard<std::mutex> lock(mutex_);
  communicators_[next_key_] = {std::move(name), std::move(error), std::move(abort)};
  return next_key_++;
}

void AsyncWatchdog::remove_communicator(int64_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  communicators_.erase(key);
}

void AsyncWatchdog::watch(std::string what, std::chrono::seconds timeout, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(mutex_);
  operations_.push_back({std::move(what), timeout, Clock::now() + timeout, std::move(done)});
}

size_t AsyncWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return operations_.size();
}

void AsyncWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, tick_);
    if (stopping_ || failed_) continue;
    for (const auto& [key, communicator] : communicators_) {
      const std::string error = communicator.error();
      if (!error.empty()) {
        fail(str(communicator.name, " failed: ", error));
        break;
      }
    }
    if (failed_) continue;
    // Dropping an operation releases what its probe holds (NCCL: its CUDA event).
    operations_.erase(std::remove_if(operations_.begin(), operations_.end(), [](Operation& op) { return op.done(); }),
                      operations_.end());
    const auto now = Clock::now();
    for (const Operation& op : operations_)
      if (now > op.deadline) {
        fail(str(op.what, " made no progress for ", op.timeout.count(),
                 " s (parallel.timeout_s): a peer is stopped, stuck or lost"));
        break;
      }
  }
}

void AsyncWatchdog::fail(const std::string& why) {
  failed_ = true;
  for (const auto& [key, communicator] : communicators_) communicator.abort();
  failure_(why + "; aborted this rank's communicators, ending the job");
}

AsyncWatchdog& nccl_watchdog() {
  // Never destroyed, its thread never joined: the process may end at any moment.
  static AsyncWatchdog* watchdog = new AsyncWatchdog(std::chrono::milliseconds(250), [](const std::string& why) {
    const std::string behind = FlightRecorder::process().explain_failure(FlightRecorder::kPeersWait);
    log::error(behind.empty() ? why : str(why, "; ", behind));
    std::_Exit(2);
  });
  return *watchdog;
}

}  // namespace trident
