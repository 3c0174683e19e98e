// The parallel layout of a run: how its work is split over ranks and micro-batches. It is the
// one description the trainer, the memory and time estimates and the planner share, and
// resolve_layout is the one function that builds it from a config.
//
// Vocabulary, one spelling per axis: sizes are tp_size, cp_size, dp_size, pp_size (and ep_size
// for the experts); the grid's axes "tp", "cp", "dp", "pp" (grid(); "ep", "edp" in
// expert_grid()); a rank's coordinates tp, cp, dp, pp; its groups tp_group(), dp_group(),
// pp_group(), ep_group() and the context-parallel layers' shared_cp_group()
// (parallel/comm/process_groups.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/process_grid.h"

namespace trident {

// What a ZeRO stage shards over the `replicas` ranks that hold the same parameters (DP x CP), in
// one place: the optimizer, its gradient buffer, checkpoints, the trainer and the estimates ask
// these instead of comparing stage numbers. resolve_layout refuses a stage outside 0-3 (a
// Config built in C++ skips the config's own range check), so a ZeroSharding holds 0 to 3.
struct ZeroSharding {
  int64_t stage = 0;     // parallel.zero_stage, 0 to 3
  int64_t replicas = 1;  // dp_size x cp_size

  // Gradients are reduce-scattered (each rank reduces its slice) rather than all-reduced.
  bool reduce_scatters() const { return stage >= 1; }
  // Only this rank's slice of the gradient buffer is kept (stages 2 and 3).
  bool shards_grads() const { return stage >= 2; }
  // Only this rank's slice of the weights is kept; units are gathered when used (stage 3).
  bool shards_weights() const { return stage == 3; }
  // The slices buckets are padded to: the replicas from stage 1 on, else one.
  int64_t shards() const { return reduce_scatters() ? replicas : 1; }
  // Ranks hold different parts of the optimizer state (and each writes its own to a checkpoint).
  bool sharded() const { return shards() > 1; }
};

// A rank's place along tensor parallelism: part `rank` of `size`.
struct TensorParallelPlace {
  int64_t rank = 0, size = 1;
};

// A rank's place along expert parallelism: it holds experts [rank, rank + 1) x E / size.
struct ExpertParallelPlace {
  int64_t rank = 0, size = 1;
};

struct Layout {
  int64_t tp_size = 1, cp_size = 1, dp_size = 1, pp_size = 1;
  // How attention crosses the cp_size ranks: Ulysses' all-to-alls within groups of ulysses_size
  // consecutive ones (1: none, ring attention alone), ring attention across the groups (none when
  // ulysses_size is cp_size).
  int64_t ulysses_size = 1;
  // Ranks that split the experts, carved from the cp_size x dp_size ranks (expert_grid()).
  int64_t ep_size = 1;
  int64_t virtual_stages = 1;      // model chunks per pipeline stage (interleaved 1F1B, ZB-V, DualPipe-V)
  bool embedding_and_loss_as_layers = false;  // in the layers' split (chunk_layers)
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
  // The ranks as a grid with axes "tp", "cp", "dp", "pp", in Megatron's order: tensor-parallel
  // ranks vary fastest (they share a node's fastest links), then context, data and pipeline.
  ProcessGrid grid() const {
    return ProcessGrid({{"tp", tp_size}, {"cp", cp_size}, {"dp", dp_size}, {"pp", pp_size}});
  }
  // The context-parallel axis seen as Ulysses' groups ("ulysses", fastest) met by a ring ("ring"),
  // USP's two levels (parallel/context_attention.h):
  //   cp 4 = ulysses 2 x ring 2:   cp ranks [0 1] [2 3]   ulysses groups {0,1} {2,3}, rings {0,2} {1,3}
  ProcessGrid context_grid() const {
    return grid().view({"cp"}, {{"ulysses", ulysses_size}, {"ring", ring_size()}});
  }
  int64_t ring_size() const { return cp_size / ulysses_size; }
  // The same ranks as experts see them (Megatron's expert layout, with expert TP = TP): the
  // context- and data-parallel ranks of a stage factored as expert-parallel ranks ("ep", fastest)
  // times the expert-data-parallel ranks that hold copies of the same experts ("edp"):
  //   tp 1, cp 1, dp 4, ep 2:   dp ranks [0 1 2 3]   ep groups {0,1} {2,3}, edp groups {0,2} {1,3}
  ProcessGrid expert_grid() const {
    return grid().view({"cp", "dp"}, {{"ep", ep_size}, {"edp", expert_replicas()}});
  }
  int64_t expert_replicas() const { return cp_size * dp_size / ep_size; }
  ZeroSharding zero() const { return {zero_stage, dp_size * cp_size}; }
  // What the ZeRO stage shards of the experts: over their copies, the expert-data-parallel ranks.
  ZeroSharding expert_zero() const { return {zero_stage, expert_replicas()}; }
  // The virtual stage (the model's chunks in order, 0 .. pp_size x virtual_stages - 1) that chunk
  // `chunk` of pipeline rank `pp_rank` holds: a loop for the interleaved schedule, a V for ZB-V
  // and DualPipe-V, whose first and last chunks both sit on rank 0.
  //
  //   loop (c x p + r):          p = 3, v = 2:  stages 0 1 2 3 4 5 on ranks 0 1 2 0 1 2
  //   V (r, then 2p - 1 - r):    p = 3, v = 2:  stages 0 1 2 3 4 5 on ranks 0 1 2 2 1 0
  int64_t virtual_stage(int64_t chunk, int64_t pp_rank) const;
  // The pipeline rank that holds the model's last stage (the head and the loss): the last, or
  // rank 0 in a V.
  int64_t head_rank() const { return v_shaped(schedule) ? 0 : pp_size - 1; }

  // Tokens of each sequence a rank holds: seq_length / cp_size, and / tp_size again between
  // the layers with sequence parallelism (what travels between pipeline stages).
  int64_t local_sequence(int64_t seq_length) const {
    return seq_length / cp_size / (sequence_parallel ? tp_size : 1);
  }
};

// The contiguous layers of pipeline chunk `index` of `chunks` (pp_size x virtual_stages, in
// pipeline order: chunk c x pp_size + pp_rank is a stage's c-th). The layers are dealt evenly;
// with `embedding_and_loss_as_layers` the embedding (before layer 0) and the loss (after the
// last layer) fill one layer's slot each, so the first and last chunks hold one layer fewer and
// may hold none (Llama 3's 126 layers on 16 stages x 8 chunks: 128 slots of one layer).
//
//   4 layers, 3 chunks, ends as layers:   slots  [emb L0] [L1 L2] [L3 loss]
//                                         chunk     0        1        2
struct LayerRange {
  int64_t first = 0, count = 0;
};
// The slots pipeline chunks share: the layers, and the embedding and loss when they count as layers.
int64_t layer_slots(int64_t num_layers, bool embedding_and_loss_as_layers);
LayerRange chunk_layers(int64_t num_layers, int64_t chunks, int64_t index, bool embedding_and_loss_as_layers);
// The layers pipeline stage `pp_rank` holds over its virtual_stages chunks: their global
// indices, in chunk order, and how many.
std::vector<int64_t> stage_layer_indices(const Layout& layout, int64_t num_layers, int64_t pp_rank);
int64_t stage_layers(const Layout& layout, int64_t num_layers, int64_t pp_rank);

// "TP 2 x CP 2 x PP 2 x DP 1" (CP only when there is context parallelism; the experts' EP and
// EDP when there is expert parallelism).
std::string describe_axes(const Layout& layout);

// The layout `config` asks for on `world_size` ranks. Throws Error naming the keys at fault when
// the parallel settings, the batch and the model's shape do not fit together.
Layout resolve_layout(const Config& config, int64_t world_size);
// Why resolve_layout would throw, "" when it would not (the planner's candidates).
std::string layout_problem(const Config& config, int64_t world_size);

}  // namespace trident
