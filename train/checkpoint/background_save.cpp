#include "train/checkpoint/background_save.h"

#include "core/error.h"
#include "core/timer.h"
#include "parallel/comm/failure.h"

namespace trident {
BackgroundSave::BackgroundSave(const CheckpointStore& store, Communicator& cpu_world, const ProcessGroups& groups,
                               const CheckpointRequest& request)
    : store_(store), cpu_world_(cpu_world), iteration_(request.progress.iteration),
      keep_(request.config.train.keep_checkpoints), first_unhealthy_(request.progress.first_unhealthy),
      loss_(request.loss), leader_(groups.world().rank() == 0) {
  RankShare copy;
  try {
    agree(cpu_world, [&] {
      if (leader_) store.begin(iteration_);
    });
    // A copy that fails (host memory) on any rank ends the save on every rank, reported once.
    agree(cpu_world, [&] { copy = host_copy(rank_share(groups, request)); });
  } catch (const JobError&) {
    if (leader_) store.abandon(iteration_);
    throw;
  }
  writer_ = std::thread([this, copy = std::move(copy)] {
    const Stopwatch writing;
    try {
      write_share(store_.staging_path(iteration_), copy);
    } catch (...) {
      failure_ = std::current_exception();
    }
    write_seconds_ = writing.elapsed_s();
    written_ = true;
  });
}

BackgroundSave::~BackgroundSave() {
  if (writer_.joinable()) writer_.join();
}

double BackgroundSave::publish() {
  const Stopwatch waiting;
  writer_.join();
  const double waited = waiting.elapsed_s();
  try {
    agree(cpu_world_, [&] {
      if (failure_) std::rethrow_exception(failure_);
    });
    agree(cpu_world_, [&] {
      if (leader_) store_.commit(iteration_, keep_, loss_, first_unhealthy_);
    });
  } catch (const JobError&) {
    if (leader_) store_.abandon(iteration_);
    throw;
  }
  return waited;
}

}  // namespace trident
