// Published training runs the planner is checked on, each with its model, layout, device,
// software and what it measured: tokens per second per GPU, and peak memory where published.
// A run either calibrates (a profile constant or setting was chosen on it: `calibrates` says
// which) or is held out (a prediction). docs/planning.md lists them with their sources.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/plan/device_profile.h"
#include "core/plan/software.h"

namespace trident {

struct PublishedRun {
  std::string id;     // "torchtitan 8B FSDP 8 compile"
  std::string stack;  // the software stack: megatron-core, torchtitan, llm-foundry, ...
  std::string source; // where the numbers are published
  DeviceProfile device;  // its memory_gib the run's GPUs'
  int64_t gpus = 0;
  Config config;  // model, layout, batch, precision, recompute as the run had them
  Software software;
  double tokens_per_s_per_gpu = 0;  // measured
  double peak_memory_gib = 0;       // measured (allocator reserved; trident's: allocated), 0 where not published
  std::string calibrates;           // what this run set; "" for a held-out run
};

const std::vector<PublishedRun>& published_runs();

}  // namespace trident
