// The parallel layout of a run: TP x PP x DP ranks and the micro-batch count they imply.
#pragma once

#include <cstdint>

#include "core/config.h"

namespace trident {

struct Layout {
  int64_t world_size = 1;
  int64_t tensor = 1;
  int64_t pipeline = 1;
  int64_t data = 1;
  // M = global_batch / (micro_batch * DP): the pipeline's micro-batches and the
  // gradient-accumulation count.
  int64_t micro_batches = 1;
};

// Checks world_size against parallel.* and batch.* and throws Error naming the keys at fault.
Layout resolve_layout(const Config& config, int64_t world_size);

}  // namespace trident
