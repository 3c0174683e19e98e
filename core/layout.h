// The parallel layout of a run: how its work is split over ranks and micro-batches. It is the
// one description the trainer, the memory and time estimates and the planner share, and
// resolve_layout is the one function that builds it from a config.
//
// Vocabulary, one spelling per axis: sizes are tp_size, cp_size, dp_size, pp_size; a rank's
// coordinates tp, cp, dp, pp; its groups tp_group(), cp_group(), dp_group(), pp_group()
// (parallel/comm/process_groups.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"

namespace trident {

struct Layout {
  int64_t tp_size = 1, cp_size = 1, dp_size = 1, pp_size = 1;
  int64_t virtual_stages = 1;      // model chunks per pipeline stage (interleaved 1F1B)
  bool sequence_parallel = false;  // asked for and tp_size > 1
  int64_t zero_stage = 0;
  bool offload = false;            // optimizer states in host memory (optimizer.offload=cpu)
  Schedule schedule = Schedule::one_f_one_b;
  int64_t micro_batch = 1;
  // M = global_batch / (micro_batch x dp_size): the pipeline's micro-batches and the
  // gradient-accumulation count.
  int64_t micro_batches = 1;
  Recompute recompute = Recompute::none;

  int64_t world_size() const { return tp_size * cp_size * dp_size * pp_size; }
  // Tokens of each sequence a rank holds: seq_length / cp_size, and / tp_size again between
  // the layers with sequence parallelism (what travels between pipeline stages).
  int64_t local_sequence(int64_t seq_length) const {
    return seq_length / cp_size / (sequence_parallel ? tp_size : 1);
  }
};

// "TP 2 x CP 2 x PP 2 x DP 1" (CP only when there is context parallelism).
std::string describe_axes(const Layout& layout);

// The layout `config` asks for on `world_size` ranks. Throws Error naming the keys at fault when
// the parallel settings, the batch and the model's shape do not fit together.
Layout resolve_layout(const Config& config, int64_t world_size);
// Why resolve_layout would throw, "" when it would not (the planner's candidates).
std::string layout_problem(const Config& config, int64_t world_size);

}  // namespace trident
