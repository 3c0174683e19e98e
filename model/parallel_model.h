// This rank's part of the model: one GPT chunk per virtual pipeline stage it runs, and their
// parameters with roles in model order.
#pragma once

#include <torch/types.h>

#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "model/gpt.h"
#include "parallel/parameter_role.h"

namespace trident {

class ProcessGroups;

struct ParallelModel {
  std::vector<GPT> chunks;
  std::vector<RoledParameter> params;  // every chunk's, in model order
  std::vector<int64_t> units;          // per parameter, its ZeRO-3 unit (GPTImpl::parameter_units)
};

// Chunk c of pipeline stage pp is virtual stage layout.virtual_stage(c, pp): contiguous layers, the
// embedding on the model's first virtual stage, the head on its last. Every parameter is drawn
// whole from train.seed and sliced to this TP rank and its experts to this EP rank (model/init.h), in `dtype` on `device`.
// `vocab` is the padded vocabulary.
ParallelModel build_parallel_model(const Config& config, const Layout& layout, const ProcessGroups& groups,
                                   int64_t vocab, torch::Dtype dtype, const torch::Device& device);

}  // namespace trident
