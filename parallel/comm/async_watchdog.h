// Deadlines for communication that completes asynchronously: NCCL enqueues its collectives on a
// CUDA stream and the host never waits for them, so a dead or stuck peer would hang the job
// forever. Each operation is watched from when it is enqueued, with a probe that says whether it
// completed (a CUDA event recorded after it); a thread polls the oldest and every watched
// communicator's asynchronous error. An operation still incomplete past its deadline, or a
// communicator that reports an error, aborts every watched communicator (so that no kernel
// waits on a peer any more) and ends the job with the operation, its group and this rank named:
// the same failure path as the CPU backends' deadlines (parallel/comm/watchdog.h).
//
// Every pending operation is polled each tick (each NCCL communicator has its own stream, and
// streams complete in any order relative to one another), and dropped, with whatever its probe
// holds, once it completed. Probes and aborts run on the watchdog's thread (cudaEventQuery,
// ncclCommGetAsyncError and ncclCommAbort may be called from any thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace trident {

class AsyncWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // Called once, on the watchdog's thread, after the communicators are aborted.
  using Failure = std::function<void(const std::string& why)>;

  AsyncWatchdog(std::chrono::milliseconds tick, Failure failure);
  ~AsyncWatchdog();
  AsyncWatchdog(const AsyncWatchdog&) = delete;
  AsyncWatchdog& operator=(const AsyncWatchdog&) = delete;

  // A communicator to poll and, on a failure, to abort. `error` returns "" while it is healthy.
  // Returns a key for remove_communicator (before the communicator is destroyed).
  int64_t add_communicator(std::string name, std::function<std::string()> error, std::function<void()> abort);
  void remove_communicator(int64_t key);
  // An operation enqueued now; `done` says whether it has completed. `done` is destroyed (and
  // what it captured released) on the watchdog's thread once it returned true.
  void watch(std::string what, std::chrono::seconds timeout, std::function<bool()> done);
  // Operations not yet seen completed.
  size_t pending() const;

 private:
  struct Operation {
    std::string what;
    std::chrono::seconds timeout;
    Clock::time_point deadline;
    std::function<bool()> done;
  };
  struct Watched {
    std::string name;
    std::function<std::string()> error;
    std::function<void()> abort;
  };
  void loop();
  void fail(const std::string& why);  // with mutex_ held

  std::chrono::milliseconds tick_;
  Failure failure_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Operation> operations_;
  std::map<int64_t, Watched> communicators_;
  int64_t next_key_ = 0;
  bool stopping_ = false, failed_ = false;
  std::thread thread_;
};

// The process's watchdog for NCCL: its failure prints the error and ends the process, which
// makes the launcher end the job.
AsyncWatchdog& nccl_watchdog();

}  // namespace trident
