#include "train/divergence_stop.h"

#include "core/error.h"
#include "core/logging.h"
#include "core/text.h"
#include "train/checkpoint/checkpoint.h"

namespace trident {

void stop_diverged(CheckpointStore* checkpoints, bool marks, int world_size, const std::string& what, int64_t iteration,
                   int64_t first_bad) {
  if (checkpoints && marks)
    for (int64_t saved : checkpoints->iterations())
      if (saved >= first_bad - 1 && saved < iteration) try {
          checkpoints->mark_unhealthy(saved, str("iteration ", iteration, ": ", what));
        } catch (const std::exception& e) {
          log::warn(str("could not mark ", checkpoints->path(saved), " unhealthy (", e.what(), "): do not resume ",
                        "from it, nor let a later save's rotation count on it"));
        }
  const std::string saved = checkpoints ? recovery_advice(*checkpoints, first_bad) : "no checkpoint was saved";
  throw JobError::everywhere(str("iteration ", iteration, ": ", what, ": training diverged; stopped ",
                                 "before saving anything at this iteration (", saved, ")"),
                             world_size);
}

}  // namespace trident
