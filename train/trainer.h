// The training loop as a library: build from a Config, then train() or step() yourself.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "model/parallel_model.h"
#include "parallel/comm/launch.h"
#include "train/data/samples.h"
#include "train/hooks.h"
#include "train/loss_guard.h"
#include "train/metrics.h"

namespace trident {

struct GPTData;
struct PipelineOptions;
class CheckpointStore;
struct CheckpointRequest;
class ZeroOptimizer;
class LossScaler;
class ProcessGroups;
class Communicator;

class BackgroundSave;
class IterationProfile;

// How train() ended: every iteration done, or stopped early, for a stop signal (SIGTERM, SIGINT:
// train/stop_signals.h) on any rank, train.exit_after_minutes or the program's request_stop(),
// after saving a checkpoint (when train.checkpoint_dir is set).
struct TrainingEnd {
  bool completed = true;
  std::string stopped_by;  // "SIGTERM", "SIGINT", "train.exit_after_minutes", "request_stop()"
  // For a program to exit with: 0 when completed or stopped by request_stop(), 128 + the
  // signal's number (143 for SIGTERM, 130 for SIGINT, as a shell reports them), 3 at
  // train.exit_after_minutes.
  int exit_code = 0;
};

class Trainer {
 public:
  // Checks the config, the launch environment, the data and the checkpoint folder (in that
  // order, before building anything heavy), then builds the model and optimizer, resuming
  // from train.checkpoint_dir when it holds a checkpoint and train.resume is set. Connects to
  // the job's other processes unless `cpu_world` (parallel/comm/communicator.h's connect_world) is given.
  // A setup error on any rank throws JobError on every rank (parallel/comm/failure.h).
  explicit Trainer(Config config, const LaunchInfo& launch = detect_launch(),
                   std::shared_ptr<Communicator> cpu_world = nullptr);
  // data.type=program: trains on the program's own samples instead of data.path's.
  Trainer(Config config, const SampleSource& source, const LaunchInfo& launch = detect_launch(),
          std::shared_ptr<Communicator> cpu_world = nullptr);
  ~Trainer();

  // Iterates up to train.iters, logging, validating and checkpointing as configured, or until a
  // stop is asked for (see TrainingEnd).
  TrainingEnd train();
  // One iteration: M micro-batches forward and backward, clip, AdamW step (skipped by fp16's
  // loss scaler when the gradients overflow).
  IterationMetrics step();
  // Mean validation loss over train.eval_iters global batches (the same batches every call) of
  // each validation dataset (data.path's held-out parts, or data.valid_path's), in order;
  // evaluate() weighs them as their blend does. A stop signal (train/stop_signals.h) cuts it short
  // before its next batch: then empty, and evaluate() is nan.
  std::vector<double> evaluate_datasets();
  double evaluate();
  // Saves the checkpoint of the current iteration now (after publishing one still being written
  // in the background), unless it is saved already. Collective.
  void save_checkpoint();

  // The program's calls into train() and its loss (train/hooks.h), replacing any given before.
  void set_hooks(Hooks hooks) { hooks_ = std::move(hooks); }
  // Asks train() to stop at the end of the current iteration (after saving, as for a signal);
  // on any rank, from a hook or another thread: the ranks agree at the end of the step.
  void request_stop() { stop_requested_ = true; }

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  const Config& config() const { return config_; }
  const Layout& layout() const { return layout_; }
  const ProcessGroups& groups() const { return *groups_; }
  // This rank's first model chunk (its only one unless the schedule is interleaved).
  GPT& model() { return model_.chunks.front(); }
  std::vector<GPT>& model_chunks() { return model_.chunks; }
  int64_t padded_vocab() const { return vocab_; }
  const ZeroOptimizer& optimizer() const { return *optimizer_; }

 private:
  // Both public constructors: `source` given for data.type=program.
  Trainer(Config config, const SampleSource* source, const LaunchInfo& launch, std::shared_ptr<Communicator> cpu_world);
  PipelineOptions pipeline_options() const;
  // Runs the program's hook `name` at `iteration`; what it throws ends the job (train/hooks.h).
  void run_hook(const char* name, int64_t iteration, const std::function<void()>& call);
  // Fails unless Hooks::loss's `losses` hold one floating-point loss per target, the same on
  // every tensor-parallel rank (compared at the first call).
  void check_program_loss(const torch::Tensor& losses, const torch::Tensor& targets, Communicator& tp);
  // The batch's loss mask (the program's, and data.eod_mask_loss's), undefined when every target counts.
  torch::Tensor loss_mask(const Batch& batch) const;
  // With a loss mask (the program's or data.eod_mask_loss's): the global batch's targets over
  // those of them whose loss counts (every rank reads the whole global batch to count them); else 1.
  double loss_normalizer(const Samples& samples, int64_t consumed) const;
  // This stage's forward of micro-batch `micro` with model chunk `chunk`: activations for the
  // next stage, or, on the stage holding the head, the micro-batch's mean loss (in fp32 or fp64).
  torch::Tensor stage_forward(const Samples& samples, int64_t consumed, int64_t chunk, int64_t micro,
                              const torch::Tensor& input);
  struct PendingStep;
  PendingStep run_step();
  // Reads the device's numbers; a non-finite gradient norm or a loss the divergence guard finds
  // diverged (not finite, or spikes that did not come back: train/loss_guard.h), outside fp16's
  // skipped steps, ends the run there (diverged); a single spike is a warning. Warns once when a
  // fresh run's first loss says the weights are too large.
  IterationMetrics complete(PendingStep& pending);
  // Throws JobError on every rank: the run diverged at `iteration`, for the reason given, the bad
  // losses starting at `first_bad`; marks the checkpoints from the iteration before it on, the
  // ones whose weights gave those losses, unhealthy.
  [[noreturn]] void diverged(const std::string& what, int64_t iteration, int64_t first_bad) const;
  // The validation loss into `m`, and each dataset's when data.path blends several.
  void validate_into(IterationMetrics& m);
  // What every rank acts on together at the end of an iteration, agreed in one small all-reduce
  // over the CPU world: publishes the checkpoint written in the background once every rank has
  // written it, and returns the stop asked for on any rank (a signal's number, kTimeLimit or
  // kStopRequested; 0 for none).
  static constexpr int kTimeLimit = 1000;      // above every signal's number
  static constexpr int kStopRequested = 1001;  // request_stop()
  int agree_on_control();
  CheckpointRequest checkpoint_request() const;
  // At a log interval of a job of several ranks (collective over the CPU world): each rank's
  // time since the last report spent computing and spent waiting in communication (the flight
  // recorder's), gathered, and one line naming the slowest and fastest rank.
  void report_stragglers(int64_t from_iteration);
  // train.async_save: copies the state to host memory and writes it in the background.
  void start_background_save();
  void publish_background_save();

  Config config_;
  Layout layout_;
  int64_t vocab_;
  torch::Device device_;
  torch::Dtype dtype_;
  std::shared_ptr<Communicator> cpu_world_;  // agreements on failures (NCCL's bootstrap on a GPU)
  std::unique_ptr<ProcessGroups> groups_;
  std::unique_ptr<GPTData> data_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  ParallelModel model_;
  std::unique_ptr<ZeroOptimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  std::optional<RunLog> log_;  // once the device, and so its peak, is known
  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t last_saved_ = -1;
  double last_loss_ = IterationMetrics::kUnknown;  // of the newest completed iteration (saved with it)
  LossGuard loss_guard_;
  std::optional<int64_t> resumed_unhealthy_;  // the iteration resumed from, when it was marked unhealthy
  std::unique_ptr<BackgroundSave> background_save_;  // at most one pending
  std::unique_ptr<IterationProfile> profile_;        // during train.profile_iteration
  Stopwatch since_built_;   // train.exit_after_minutes
  Stopwatch since_report_;  // the straggler report's interval
  double last_report_blocked_s_ = 0;
  Hooks hooks_;
  std::atomic<bool> stop_requested_{false};
  bool program_loss_checked_ = false;  // check_program_loss compared the TP ranks' losses
};

}  // namespace trident
