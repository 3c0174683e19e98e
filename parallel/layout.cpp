#include "parallel/layout.h"

#include "core/error.h"

namespace trident {

Layout resolve_layout(const Config& config, int64_t world_size) {
  const auto& p = config.parallel;
  Layout layout;
  layout.world_size = world_size;
  layout.tensor = p.tensor;
  layout.pipeline = p.pipeline;
  const int64_t model_parallel = p.tensor * p.pipeline;
  if (world_size % model_parallel != 0)
    fail("world size ", world_size, " is not divisible by parallel.tensor * parallel.pipeline = ",
         p.tensor, " * ", p.pipeline, " = ", model_parallel);
  layout.data = world_size / model_parallel;
  if (p.data != 0 && p.data != layout.data)
    fail("parallel.data=", p.data, " but world size ", world_size, " / (parallel.tensor * ",
         "parallel.pipeline) gives ", layout.data, "; set parallel.data=0 (auto) or launch ",
         p.data * model_parallel, " processes");
  const auto& b = config.batch;
  const int64_t per_step = b.micro_batch_size * layout.data;
  if (b.global_batch_size % per_step != 0)
    fail("batch.global_batch_size (", b.global_batch_size, ") must be a multiple of ",
         "batch.micro_batch_size * data-parallel size = ", b.micro_batch_size, " * ", layout.data,
         " = ", per_step);
  layout.micro_batches = b.global_batch_size / per_step;
  if (p.schedule == Schedule::interleaved_1f1b && layout.micro_batches % p.pipeline != 0)
    fail("parallel.schedule=interleaved_1f1b needs a multiple of parallel.pipeline (", p.pipeline,
         ") micro-batches, but global_batch / (micro_batch * DP) = ", layout.micro_batches);
  return layout;
}

}  // namespace trident
