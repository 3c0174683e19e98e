// One pipeline stage's forward of one micro-batch, for training and validation alike: the
// samples this data-parallel rank takes of a global batch, this rank's context-parallel chunks of
// them, their packed documents, and out the activations for the next stage or, on the stage
// holding the head, the micro-batch's mean loss over the targets that count (the program's loss
// when it gives one); and the normaliser that makes a masked loss the global batch's mean.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "model/gpt.h"
#include "parallel/pipeline.h"
#include "train/data/samples.h"
#include "train/hooks.h"

namespace trident {

class ProcessGroups;

class StageForward {
 public:
  // `hooks` and `iteration` (the trainer's count of completed iterations) are read at each call.
  // `schedule` is the run's (run_pipeline_schedule), checked.
  StageForward(const Config& config, const Layout& layout, PipelineSchedule schedule, const ProcessGroups& groups,
               torch::Device device, torch::Dtype dtype, const GPTData& data, std::vector<GPT>& chunks,
               const Hooks& hooks, const int64_t& iteration);

  // Micro-batch `micro` of the global batch at sample `consumed` of `samples`, through model
  // chunk `chunk`; `input` is the previous stage's activations (ignored on the first stage).
  torch::Tensor operator()(const Samples& samples, int64_t consumed, int64_t chunk, int64_t micro,
                           const torch::Tensor& input);
  // With a loss mask (the program's, or data.eod_mask_loss's): the global batch's targets over
  // those of them whose loss counts (every rank reads the whole global batch to count them); 1
  // without. Fails when none counts.
  double loss_normalizer(const Samples& samples, int64_t consumed) const;

  const PipelineOptions& pipeline() const { return pipeline_; }
  const ProcessGroups& groups() const { return groups_; }
  std::vector<GPT>& chunks() { return chunks_; }

 private:
  // The batch's loss mask (the program's, and data.eod_mask_loss's), undefined when every target counts.
  torch::Tensor loss_mask(const Batch& batch) const;
  // Fails unless Hooks::loss's `losses` hold one floating-point loss per target, the same on
  // every tensor-parallel rank (compared at the first call).
  void check_program_loss(const torch::Tensor& losses, const torch::Tensor& targets, Communicator& tp);

  const Config& config_;
  const Layout& layout_;
  const ProcessGroups& groups_;
  torch::Device device_;
  const GPTData& data_;
  std::vector<GPT>& chunks_;
  const Hooks& hooks_;
  const int64_t& iteration_;
  PipelineOptions pipeline_;
  bool program_loss_checked_ = false;
};

}  // namespace trident
