// A training run's checkpoint saves as the run makes them: synchronous, or copied to host memory
// and written in the background (train.async_save), published once every rank has written it,
// one pending at a time so that host memory stays bounded; the program's before_save and
// after_save hooks around each, and the log's account of how long training stopped.
#pragma once

#include <cstdint>
#include <memory>

#include "train/checkpoint/checkpoint.h"
#include "train/hooks.h"

namespace trident {

class BackgroundSave;
class ProcessGroups;

class CheckpointSaving {
 public:
  // `hooks` is read at each save (the program may set them later).
  CheckpointSaving(CheckpointStore& store, Communicator& cpu_world, const ProcessGroups& groups, const Hooks& hooks);
  ~CheckpointSaving();

  // Saves the checkpoint of request.progress.iteration now, after publishing a pending
  // background save, unless it is saved already. Collective.
  void save(const CheckpointRequest& request);
  // Copies the state of request.progress.iteration and writes it in the background (after
  // publishing a pending one). Collective.
  void start_background(const CheckpointRequest& request);
  // Whether a background save is pending, and whether this rank has written its files.
  bool pending() const { return background_ != nullptr; }
  bool written() const;
  // Publishes the pending background save (waiting for this rank's write). Collective.
  void publish();
  // The iteration resumed from: saved already.
  void resumed_at(int64_t iteration) { last_saved_ = iteration; }

 private:
  void before_save(int64_t iteration);
  void after_save(int64_t iteration);

  CheckpointStore& store_;
  Communicator& cpu_world_;
  const ProcessGroups& groups_;
  const Hooks& hooks_;
  int64_t last_saved_ = -1;
  std::unique_ptr<BackgroundSave> background_;
};

}  // namespace trident
