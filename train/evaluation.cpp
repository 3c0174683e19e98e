#include "train/evaluation.h"

#include <torch/utils.h>

#include "core/error.h"
#include "core/logging.h"
#include "core/text.h"
#include "parallel/comm/process_groups.h"
#include "train/stop_signals.h"

namespace trident {

std::vector<double> evaluate_datasets(const std::vector<DatasetPart>& validation, int64_t eval_iters,
                                      int64_t global_batch, StageForward& forward, Communicator& cpu_world,
                                      int64_t iteration) {
  torch::NoGradGuard no_grad;
  std::vector<GPT>& chunks = forward.chunks();
  for (auto& chunk : chunks) chunk->eval();
  const ProcessGroups& groups = forward.groups();
  const PipelineOptions& pipeline = forward.pipeline();
  const auto stop_agreed = [&] {
    auto stop = torch::tensor({int64_t(stop_signal())}, torch::kLong);
    cpu_world.all_reduce(stop, ReduceOp::max);
    return int(stop.item<int64_t>());
  };
  std::vector<double> losses;
  int64_t done = 0;
  for (const DatasetPart& dataset : validation) {
    auto total = torch::zeros({}, pipeline.activation_options.dtype(torch::kDouble));
    for (int64_t i = 0; i < eval_iters; ++i, ++done) {
      if (const int stop = stop_agreed()) {
        log::warn(str("validation at iteration ", iteration, " cut short by ", signal_name(stop), " after ", done, " of ",
                      eval_iters * int64_t(validation.size()), " batches: no validation loss for it"));
        return {};
      }
      const int64_t consumed = i * global_batch;
      const double divisor = double(pipeline.schedule.micro_batches) / forward.loss_normalizer(*dataset.valid, consumed);
      run_pipeline_forward(groups.pp_group(), pipeline, [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
        auto out = forward(*dataset.valid, consumed, chunk, micro, input);
        if (chunks[size_t(chunk)]->stage().head) total += out.to(torch::kDouble) / divisor;
        return out;
      });
    }
    groups.pp_group().all_reduce(total, ReduceOp::sum);
    groups.dp_cp_group().all_reduce(total, ReduceOp::avg);
    losses.push_back(total.item<double>() / double(eval_iters));
  }
  return losses;
}

}  // namespace trident
