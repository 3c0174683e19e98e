// A checkpoint written in the background (train.async_save): training stops only while every
// rank agrees on the staging folder and copies its share of the state to host memory; a thread
// writes the copy; publish() then does what save_checkpoint's last step does. The checkpoint is
// the same as a synchronous save's (files, checksums, manifest), and `latest` moves only after
// every rank's files are whole; a failed write is an error at publish(), never lost.
//
//   BackgroundSave save(store, cpu_world, groups, request);  // collective; returns at once
//   ... train ...  (every rank asks written(); when all agree it is, all call publish())
#pragma once

#include <atomic>
#include <exception>
#include <thread>

#include "train/checkpoint/checkpoint.h"

namespace trident {

class BackgroundSave {
 public:
  // Collective over `cpu_world`. Throws JobError on every rank when the staging folder cannot
  // be made.
  BackgroundSave(const CheckpointStore& store, Communicator& cpu_world, const ProcessGroups& groups,
                 const CheckpointRequest& request);
  // Waits for the write; a checkpoint never published stays in staging, which the next save of
  // its iteration replaces.
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  int64_t iteration() const { return iteration_; }
  // Whether this rank's write has ended, in success or failure. Not collective.
  bool written() const { return written_; }
  // Collective over the `cpu_world` of the constructor: waits for this rank's write, agrees on
  // every rank's outcome and publishes the checkpoint. JobError on every rank when a write
  // failed anywhere (the partial checkpoint is removed). Returns the seconds this rank waited.
  double publish();
  // Seconds this rank's write took (once written()).
  double write_seconds() const { return write_seconds_; }

 private:
  const CheckpointStore& store_;
  Communicator& cpu_world_;
  int64_t iteration_, keep_, first_unhealthy_;
  double loss_;
  bool leader_;
  std::atomic<bool> written_{false};
  std::exception_ptr failure_;
  double write_seconds_ = 0;
  std::thread writer_;
};

}  // namespace trident
