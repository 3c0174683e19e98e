#include "model/parallel_model.h"

#include "parallel/comm/process_groups.h"

namespace trident {

ParallelModel build_parallel_model(const Config& config, const Layout& layout, const ProcessGroups& groups,
                                   int64_t vocab, torch::Dtype dtype, const torch::Device& device) {
  const int64_t p = layout.pp_size, v = layout.virtual_stages;
  ParallelModel model;
  for (int64_t c = 0; c < v; ++c) {
    const int64_t stage = layout.virtual_stage(c, groups.coordinates().pp);
    GPT chunk(config.model, vocab, TensorParallel{groups.shared_tp_group(), layout.sequence_parallel},
              Stage::of(stage, p * v,
                        chunk_layers(config.model.num_layers, p * v, stage, layout.embedding_and_loss_as_layers)),
              layout.recompute,
              ContextParallel{groups.shared_cp_group(), groups.shared_ulysses_group(), groups.shared_ring_group()},
              ExpertParallel{groups.shared_ep_group()});
    if (config.precision == Precision::fp8) set_linear_multiply(*chunk, LinearMultiply::fp8);
    chunk->to(dtype);
    chunk->initialize(config.train.seed);
    chunk->to(device);
    for (auto& param : parameters_with_roles(*chunk)) model.params.push_back(std::move(param));
    for (int64_t unit : chunk->parameter_units()) model.units.push_back(unit);
    model.chunks.push_back(chunk);
  }
  return model;
}

}  // namespace trident
