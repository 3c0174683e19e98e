// This process's last communication operations, for explaining a hang (NCCL's flight recorder
// and Megatron's straggler detector, in small). Every communicator of a job is recorded
// (parallel/comm/recorded_communicator.h): each operation with its sequence number on its group
// (the n-th this rank started there), the group, its bytes, and when it started and ended.
//
// On a timeout or a failure, each rank writes its record to flight-<job>-rank-<r>.txt in the folder
// set by keep_records_in (the rank logs' folder), then reads the records of the other ranks of
// the failing group for a few seconds, and says who was behind: a rank whose last operation on
// that group is older than ours, or that left no record (stopped, stuck in computation, or cut
// off). All ranks of a job must see the folder (one machine, or a shared file system).
//
// record file, one line each:
//   address <this rank's address>                                 when known (Gloo)
//   last <group> <sequence> <operation> <finished|in-flight>     the newest operation per group
//   entry <sequence> <operation> <group> <bytes> <start_s> <end_s|->   oldest first
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "core/timer.h"

namespace trident {

class FlightRecorder {
 public:
  // The process's recorder (never destroyed: a watchdog may use it while the process ends).
  static FlightRecorder& process();

  // Where records go on a failure, which job (LaunchInfo::job, keeping jobs apart in a shared
  // folder) and world rank this process is; no folder: no records.
  void keep_records_in(std::string folder, std::string job, int world_rank);

  // This rank's address on the network the job uses (Gloo's), written into its record so that a
  // rank that failed can tell an unreachable peer from a stopped one.
  void set_address(std::string address);

  // An operation starting on `group` (its key, e.g. "data-parallel[0,2]"); returns its id.
  int64_t started(const std::string& group, int64_t sequence, const char* operation, int64_t bytes);
  // The operation `id` ended, after this rank waited `blocked_s` seconds in it.
  void finished(int64_t id, double blocked_s);
  // Seconds spent blocked in communication since the process started (the straggler report).
  double blocked_seconds() const;

  // On a failure of operation `id` (-1: unknown, the oldest in flight): writes this rank's
  // record, waits up to `wait` for the records of the other ranks of its group, and says who was
  // behind, in a clause for the error line ("" without a folder or an operation to explain).
  std::string explain_failure(std::chrono::seconds wait, int64_t id = -1);

  // Whether this rank is the first of the job to report `cause`: the first rank to fail claims
  // error-<job>-first.txt in the records' folder with its cause; a rank failing after it with the same
  // cause, numbers aside (ports, ranks, positions), is not, and stays silent. True without a
  // folder, or when the claim cannot be read.
  bool first_to_report(const std::string& cause);

  static constexpr size_t kKept = 512;
  // How long a failing rank waits for the other ranks' records (they fail at about the same time).
  static constexpr std::chrono::seconds kPeersWait{5};

 private:
  struct Entry {
    int64_t id, sequence, bytes;
    std::string operation, group;
    double start_s, end_s;  // end_s < 0: in flight
  };
  std::string write_record() const;  // returns the file written (mutex_ held)
  std::string job_file(const std::string& kind, const std::string& name) const;  // <kind>-<job>-<name>.txt
  std::string record_file(int rank) const;

  mutable std::mutex mutex_;
  std::deque<Entry> entries_;
  std::map<std::string, Entry> last_;  // per group
  int64_t next_id_ = 0;
  double blocked_s_ = 0;
  std::string folder_, job_, address_;
  int rank_ = 0;
  Stopwatch epoch_;  // entries' times are seconds since the recorder was made
};

}  // namespace trident
