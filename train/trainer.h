// The training loop as a library: build from a Config, then train() or step() yourself.
#pragma once

#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <vector>

#include "core/config.h"
#include "model/gpt.h"
#include "parallel/parameter_role.h"
#include "core/layout.h"
#include "parallel/launch.h"

namespace trident {

struct GPTData;
class GPTSamples;
struct PipelineOptions;
class CheckpointStore;
struct TrainingProgress;
class ZeroOptimizer;
class LossScaler;
class ProcessGroups;
class Communicator;

struct IterationMetrics {
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  int64_t iteration = 0;         // completed iterations, counting this one
  int64_t consumed_samples = 0;  // after this iteration
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = 0;          // before clipping (unscaled)
  double loss_scale = 1;         // fp16's dynamic scale used by this iteration
  bool skipped = false;          // fp16: inf or nan in the gradients, the optimizer did not step
  int64_t skipped_total = 0;     // skipped iterations so far
  double elapsed_ms = 0;
  double tokens_per_second = 0;
  double tflops_6pd = 0;         // per device, 6 * parameters * tokens
  double tflops_model = 0;       // per device, Megatron formula without recompute
  double tflops_hardware = 0;    // per device, recomputed forward work included
  double mfu = kUnknown;         // tflops_model / device peak, when the peak is known
  double valid_loss = kUnknown;  // set on validation iterations
  int64_t max_in_flight = 0;     // this rank's pipeline stage: peak micro-batches held
  double pipeline_transfer_ms = 0;  // this rank's time in pipeline exchanges
};

class Trainer {
 public:
  // Checks the config, the launch environment, the data and the checkpoint folder (in that
  // order, before building anything heavy), then builds the model and optimizer, resuming
  // from train.checkpoint_dir when it holds a checkpoint and train.resume is set. Connects to
  // the job's other processes unless `cpu_world` (parallel/comm.h's connect_world) is given.
  // A setup error on any rank throws JobError on every rank (parallel/failure.h).
  explicit Trainer(Config config, const LaunchInfo& launch = detect_launch(),
                   std::shared_ptr<Communicator> cpu_world = nullptr);
  ~Trainer();

  // Iterates up to train.iters, logging, validating and checkpointing as configured.
  void train();
  // One iteration: M micro-batches forward and backward, clip, AdamW step (skipped by fp16's
  // loss scaler when the gradients overflow).
  IterationMetrics step();
  // Mean validation loss over train.eval_iters global batches (the same batches every call).
  double evaluate();
  void save_checkpoint();

  // Called after every iteration of train(), validation included.
  void on_iteration(std::function<void(const IterationMetrics&)> callback);

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  const Config& config() const { return config_; }
  const Layout& layout() const { return layout_; }
  const ProcessGroups& groups() const { return *groups_; }
  // This rank's first model chunk (its only one unless the schedule is interleaved).
  GPT& model() { return chunks_.front(); }
  std::vector<GPT>& model_chunks() { return chunks_; }
  int64_t padded_vocab() const { return vocab_; }

 private:
  // Opens train.checkpoint_dir (probed for writing on the ranks that save) and returns the
  // checkpoint to resume from ("" for none).
  std::string open_checkpoints(TrainingProgress& progress);
  void build_model_chunks();
  PipelineOptions pipeline_options() const;
  // This stage's forward of one micro-batch (tokens read on the first and last stages); the
  // last stage returns the loss scaled by 1/M and adds it to `loss_sum`.
  torch::Tensor stage_forward(const GPTSamples& samples, int64_t consumed, int64_t chunk,
                              int64_t micro, const torch::Tensor& input, torch::Tensor& loss_sum);
  struct PendingStep;
  PendingStep run_step();
  // Reads the device's numbers; a non-finite loss or gradient norm (outside fp16's skipped
  // steps) ends the run there (diverged).
  IterationMetrics complete(PendingStep& pending);
  // Throws JobError on every rank: the run diverged at `iteration`, for the reason given.
  [[noreturn]] void diverged(const std::string& what, int64_t iteration) const;
  void write_metrics(std::ofstream& file, const IterationMetrics& m) const;
  void log_start() const;
  void log_memory() const;
  void log_iteration(const IterationMetrics& m) const;

  Config config_;
  Layout layout_;
  torch::Device device_;
  torch::Dtype dtype_;
  int64_t vocab_;
  std::shared_ptr<Communicator> cpu_world_;  // agreements on failures (NCCL's bootstrap on a GPU)
  std::unique_ptr<ProcessGroups> groups_;
  std::unique_ptr<GPTData> data_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::vector<GPT> chunks_;
  std::vector<RoledParameter> params_;  // every chunk's, in model order, with their roles
  torch::Dtype main_dtype_;
  std::unique_ptr<ZeroOptimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t last_saved_ = -1;
  double last_loss_ = IterationMetrics::kUnknown;  // of the newest completed iteration (saved with it)
  double peak_tflops_ = 0;
  std::vector<std::function<void(const IterationMetrics&)>> callbacks_;
};

}  // namespace trident
