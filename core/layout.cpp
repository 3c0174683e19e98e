#include "core/layout.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace trident {
namespace {

// Builds the layout into `out`; returns what does not fit, "" when everything does.
std::string build(const Config& config, int64_t world_size, Layout& out) {
  const auto& m = config.model;
  const auto& p = config.parallel;
  const auto& b = config.batch;
  const bool interleaved = p.schedule == Schedule::interleaved_1f1b;
  const bool v_shape = v_shaped(p.schedule);
  if ((interleaved || v_shape) && p.pipeline < 2)
    return str("parallel.schedule=", p.schedule, " needs parallel.pipeline >= 2");
  if (v_shape && p.virtual_stages != 2)
    return str("parallel.schedule=", p.schedule,
               " runs two chunks per stage placed in a V: set parallel.virtual_stages=2 (got ", p.virtual_stages, ")");
  if (!v_shape && interleaved != (p.virtual_stages > 1))
    return str("parallel.schedule=interleaved_1f1b and parallel.virtual_stages > 1 go together (got ",
               p.schedule, " with ", p.virtual_stages, " virtual stages)");
  // Config::set checks this for files and --set; a Config built in C++ reaches here unchecked.
  if (p.zero_stage < 0 || p.zero_stage > 3)
    return str("parallel.zero_stage must be 0, 1, 2 or 3 (got ", p.zero_stage, ")");
  if (p.ulysses_size < 0) return str("parallel.ulysses_size must be 0 (all of parallel.context) or more (got ",
                                     p.ulysses_size, ")");
  for (auto [name, value] : {std::pair{"model.num_attention_heads", m.num_attention_heads},
                             std::pair{"model.num_query_groups", m.query_groups()},
                             std::pair{"model.hidden_size", m.hidden_size},
                             std::pair{"model.ffn_hidden_size (effective)", m.ffn()},
                             std::pair{"model.moe_ffn_hidden_size (effective)", m.num_moe_experts > 0 ? m.moe_ffn() : 0},
                             std::pair{"model.moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size}})
    if (value % p.tensor != 0)
      return str(name, " (", value, ") must be divisible by parallel.tensor (", p.tensor, ")");
  // Context parallelism cuts each sequence into 2 x context chunks (parallel/context_parallel.h),
  // sequence parallelism each rank's tokens into tensor parts.
  const bool split = p.context > 1;
  const int64_t sequence_parts = (split ? 2 * p.context : 1) * (p.sequence_parallel ? p.tensor : 1);
  if (m.seq_length % sequence_parts != 0) {
    const std::string divisor = split && p.sequence_parallel ? "2 * parallel.context * parallel.tensor"
                                : split                      ? "2 * parallel.context"
                                                             : "parallel.tensor";
    return str("model.seq_length (", m.seq_length, ") must be divisible by ", divisor, " (", sequence_parts, ")",
               p.sequence_parallel ? " with parallel.sequence_parallel" : "");
  }
  // Ulysses deals each tensor-parallel rank's query heads out to the ranks of its groups (key/value
  // groups too, repeated where they do not deal out evenly).
  const bool ulysses = p.context_parallel_type == ContextParallelType::ulysses;
  if (!ulysses && p.ulysses_size != 0)
    return str("parallel.ulysses_size=", p.ulysses_size, " is for parallel.context_parallel_type=ulysses (got ",
               p.context_parallel_type, "); leave it 0");
  const int64_t ulysses_size = !ulysses ? 1 : p.ulysses_size == 0 ? p.context : p.ulysses_size;
  if (p.context % ulysses_size != 0)
    return str("parallel.ulysses_size (", ulysses_size, ") must divide parallel.context (", p.context,
               "): Ulysses' groups are met by a ring of parallel.context / parallel.ulysses_size");
  if ((m.num_attention_heads / p.tensor) % ulysses_size != 0)
    return str("parallel.context_parallel_type=ulysses deals each tensor-parallel rank's ",
               m.num_attention_heads / p.tensor, " attention heads (model.num_attention_heads / parallel.tensor) ",
               "out to ", p.ulysses_size == 0 ? "parallel.context=" : "parallel.ulysses_size=", ulysses_size,
               " ranks: they must be a multiple of it (or use ring, or a smaller parallel.ulysses_size)");
  const int64_t chunks = p.pipeline * p.virtual_stages;
  if (p.embedding_and_loss_as_layers && (m.num_layers + 2) % chunks != 0)
    return str("model.num_layers + 2 (", m.num_layers + 2, ": the embedding and the loss count as layers with ",
               "parallel.embedding_and_loss_as_layers) must be divisible by parallel.pipeline * ",
               "parallel.virtual_stages (", chunks, ")",
               m.num_layers % chunks == 0 ? " (or set parallel.embedding_and_loss_as_layers=false)" : "");
  if (!p.embedding_and_loss_as_layers && m.num_layers % chunks != 0)
    return str("model.num_layers (", m.num_layers, ") must be divisible by parallel.pipeline * ",
               "parallel.virtual_stages (", chunks, ")",
               (m.num_layers + 2) % chunks == 0 ? " (or set parallel.embedding_and_loss_as_layers=true)" : "");

  const int64_t model_parallel = p.tensor * p.context * p.pipeline;
  if (world_size % model_parallel != 0)
    return str("world size ", world_size, " is not divisible by parallel.tensor * parallel.context * ",
               "parallel.pipeline = ", p.tensor, " * ", p.context, " * ", p.pipeline, " = ", model_parallel);
  const int64_t dp_size = world_size / model_parallel;
  if (p.data != 0 && p.data != dp_size)
    return str("parallel.data=", p.data, " but world size ", world_size, " / (parallel.tensor * ",
               "parallel.context * parallel.pipeline) gives ", dp_size, "; set parallel.data=0 (auto) or launch ",
               p.data * model_parallel, " processes");
  // Expert parallelism carves its groups from the data- and context-parallel ranks of a stage.
  if (p.expert > 1 && m.num_moe_experts == 0)
    return str("parallel.expert=", p.expert, " splits the experts of a Mixture-of-Experts model, but ",
               "model.num_moe_experts is 0; leave it 1");
  if (m.num_moe_experts % p.expert != 0)
    return str("model.num_moe_experts (", m.num_moe_experts, ") must be divisible by parallel.expert (", p.expert,
               "): each expert-parallel rank holds as many experts");
  if ((dp_size * p.context) % p.expert != 0)
    return str("parallel.expert (", p.expert, ") must divide the data- and context-parallel ranks (", dp_size,
               " x ", p.context, " = ", dp_size * p.context, "), from which its groups are carved");
  const int64_t per_step = b.micro_batch_size * dp_size;
  if (b.global_batch_size % per_step != 0)
    return str("batch.global_batch_size (", b.global_batch_size, ") must be a multiple of ",
               "batch.micro_batch_size * data-parallel size = ", b.micro_batch_size, " * ", dp_size,
               " = ", per_step);
  const int64_t micro_batches = b.global_batch_size / per_step;
  if (interleaved && micro_batches % p.pipeline != 0)
    return str("parallel.schedule=interleaved_1f1b needs a multiple of parallel.pipeline (", p.pipeline,
               ") micro-batches, but global_batch / (micro_batch * DP) = ", micro_batches);
  // As torch's ScheduleDualPipeV: fewer do not fill its V (zb-v runs them).
  if (p.schedule == Schedule::dualpipe_v && micro_batches < 2 * p.pipeline)
    return str("parallel.schedule=dualpipe-v needs at least 2 x parallel.pipeline (", 2 * p.pipeline,
               ") micro-batches, but global_batch / (micro_batch * DP) = ", micro_batches, " (zb-v runs fewer)");

  out.tp_size = p.tensor;
  out.cp_size = p.context;
  out.ulysses_size = ulysses_size;
  out.pp_size = p.pipeline;
  out.dp_size = dp_size;
  out.ep_size = p.expert;
  out.virtual_stages = p.virtual_stages;
  out.embedding_and_loss_as_layers = p.embedding_and_loss_as_layers;
  out.sequence_parallel = p.sequence_parallel && p.tensor > 1;
  out.zero_stage = p.zero_stage;
  out.offload = config.optimizer.offload == Offload::cpu;
  out.schedule = p.schedule;
  out.micro_batch = b.micro_batch_size;
  out.micro_batches = micro_batches;
  out.recompute = config.recompute;
  return "";
}

}  // namespace

int64_t layer_slots(int64_t num_layers, bool embedding_and_loss_as_layers) {
  return num_layers + (embedding_and_loss_as_layers ? 2 : 0);
}

LayerRange chunk_layers(int64_t num_layers, int64_t chunks, int64_t index, bool embedding_and_loss_as_layers) {
  const int64_t ends = embedding_and_loss_as_layers ? 1 : 0;
  const int64_t slots = layer_slots(num_layers, embedding_and_loss_as_layers);
  TRIDENT_CHECK(chunks > 0 && index >= 0 && index < chunks && slots % chunks == 0, "chunk ", index, " of ", chunks,
                " cannot hold an equal share of ", slots, " layer slots");
  const int64_t per_chunk = slots / chunks;
  // Slots [index x per_chunk, (index + 1) x per_chunk), less the embedding's slot 0 and the loss's last.
  const int64_t first = std::max<int64_t>(0, index * per_chunk - ends);
  const int64_t end = std::min(num_layers, (index + 1) * per_chunk - ends);
  return {first, std::max<int64_t>(0, end - first)};
}

int64_t Layout::virtual_stage(int64_t chunk, int64_t pp_rank) const {
  TRIDENT_CHECK(chunk >= 0 && chunk < virtual_stages && pp_rank >= 0 && pp_rank < pp_size, "chunk ", chunk,
                " of pipeline rank ", pp_rank, " in a pipeline of ", pp_size, " x ", virtual_stages);
  if (v_shaped(schedule)) return chunk == 0 ? pp_rank : 2 * pp_size - 1 - pp_rank;
  return chunk * pp_size + pp_rank;
}

std::vector<int64_t> stage_layer_indices(const Layout& layout, int64_t num_layers, int64_t pp_rank) {
  std::vector<int64_t> layers;
  for (int64_t c = 0; c < layout.virtual_stages; ++c) {
    const LayerRange range = chunk_layers(num_layers, layout.pp_size * layout.virtual_stages,
                                          layout.virtual_stage(c, pp_rank), layout.embedding_and_loss_as_layers);
    for (int64_t layer = range.first; layer < range.first + range.count; ++layer) layers.push_back(layer);
  }
  return layers;
}

int64_t stage_layers(const Layout& layout, int64_t num_layers, int64_t pp_rank) {
  return int64_t(stage_layer_indices(layout, num_layers, pp_rank).size());
}

std::string describe_axes(const Layout& l) {
  const std::string cp = l.cp_size == 1        ? ""
                         : l.ulysses_size == 1 ? str(" x CP ", l.cp_size)
                         : l.ring_size() == 1  ? str(" x CP ", l.cp_size, " (ulysses)")
                                               : str(" x CP ", l.cp_size, " (ulysses ", l.ulysses_size, " x ring ",
                                                     l.ring_size(), ")");
  return str("TP ", l.tp_size, cp, " x PP ", l.pp_size, " x DP ", l.dp_size,
             l.ep_size > 1 ? str(" (experts: EP ", l.ep_size, " x EDP ", l.expert_replicas(), ")") : "");
}

Layout resolve_layout(const Config& config, int64_t world_size) {
  Layout layout;
  const std::string problem = build(config, world_size, layout);
  if (!problem.empty()) fail(problem);
  return layout;
}

std::string layout_problem(const Config& config, int64_t world_size) {
  Layout unused;
  return build(config, world_size, unused);
}

}  // namespace trident
