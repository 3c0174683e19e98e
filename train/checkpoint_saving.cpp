#include "train/checkpoint_saving.h"

#include "core/error.h"
#include "core/logging.h"
#include "core/text.h"
#include "core/timer.h"
#include "parallel/comm/process_groups.h"
#include "parallel/comm/trace_span.h"
#include "train/checkpoint/background_save.h"

namespace trident {

CheckpointSaving::CheckpointSaving(CheckpointStore& store, Communicator& cpu_world, const ProcessGroups& groups,
                                   const Hooks& hooks)
    : store_(store), cpu_world_(cpu_world), groups_(groups), hooks_(hooks) {}

CheckpointSaving::~CheckpointSaving() = default;

bool CheckpointSaving::written() const { return background_ && background_->written(); }

void CheckpointSaving::before_save(int64_t iteration) {
  if (hooks_.before_save)
    run_hook("before_save", iteration, cpu_world_.size(), [&] { hooks_.before_save(iteration, store_.path(iteration)); });
}

void CheckpointSaving::after_save(int64_t iteration) {
  if (hooks_.after_save)
    run_hook("after_save", iteration, cpu_world_.size(), [&] { hooks_.after_save(iteration, store_.path(iteration)); });
}

void CheckpointSaving::save(const CheckpointRequest& request) {
  if (background_) publish();
  const int64_t iteration = request.progress.iteration;
  if (last_saved_ == iteration) return;  // saved (or resumed from) already: the same on every rank
  before_save(iteration);
  const Stopwatch stopped;
  TRIDENT_TRACE_SPAN("checkpoint save: iteration ", iteration);
  save_checkpoint(store_, cpu_world_, groups_, request);
  last_saved_ = iteration;
  log::info(str("saved checkpoint ", store_.path(iteration), " in ", fixed(stopped.elapsed_s(), 2),
                " s (training stopped for the write)"));
  after_save(iteration);
}

void CheckpointSaving::start_background(const CheckpointRequest& request) {
  if (background_) publish();  // one pending save at a time: bounded memory
  const int64_t iteration = request.progress.iteration;
  before_save(iteration);
  const Stopwatch stopped;
  background_ = std::make_unique<BackgroundSave>(store_, cpu_world_, groups_, request);
  last_saved_ = iteration;
  log::info(str("checkpoint ", store_.path(iteration), ": training stopped ", fixed(stopped.elapsed_s(), 2),
                " s to copy the state; writing it in the background"));
}

void CheckpointSaving::publish() {
  std::unique_ptr<BackgroundSave> save = std::move(background_);
  const double waited = save->publish();
  log::info(str("saved checkpoint ", store_.path(save->iteration()), ": written in the background in ",
                fixed(save->write_seconds(), 2), " s (training waited ", fixed(waited, 2), " s for it)"));
  after_save(save->iteration());
}

}  // namespace trident
