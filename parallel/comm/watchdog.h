// A deadline for blocking communication calls that have none of their own (MPI's): while a
// CallWatch lives, a watchdog thread checks its deadline; a call that outlives it means a
// stopped or lost peer, and the watchdog prints this rank's error and ends the process, which
// makes the launcher end the job (mpirun does so within about a second).
//
//   { CallWatch watch("MPI all_gather on the data-parallel group", timeout); MPI_Allgather(...); }
//
// Calls are watched one at a time (the main thread communicates); arming and disarming take an
// uncontended lock, the thread wakes four times a second and starts with the first watch.
#pragma once

#include <chrono>
#include <string>

namespace trident {

class CallWatch {
 public:
  CallWatch(const std::string& what, std::chrono::seconds timeout);
  ~CallWatch();
  CallWatch(const CallWatch&) = delete;
  CallWatch& operator=(const CallWatch&) = delete;
};

}  // namespace trident
