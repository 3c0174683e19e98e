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
#include "train/stop_agreement.h"
#include "train/straggler_report.h"

namespace trident {

struct GPTData;
class CheckpointStore;
struct CheckpointRequest;
class ParameterGroups;
class LossScaler;
class ProcessGroups;
class Communicator;

class CheckpointSaving;
class IterationProfile;
class StageForward;

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
  int64_t padded_vocab() const { return vocab_; }
  // The model's parameters as built (a program's own blocks' included), each counted once.
  int64_t parameter_count() const { return parameter_count_; }
  const ParameterGroups& optimizer() const { return *optimizer_; }

 private:
  // Both public constructors: `source` given for data.type=program.
  Trainer(Config config, const SampleSource* source, const LaunchInfo& launch, std::shared_ptr<Communicator> cpu_world);
  struct PendingStep;
  PendingStep run_step();
  // Reads the device's numbers; a non-finite gradient norm or a loss the divergence guard finds
  // diverged (not finite, or spikes that did not come back: train/loss_guard.h), outside fp16's
  // skipped steps, ends the run there (diverged); a single spike is a warning. Warns once when a
  // fresh run's first loss says the weights are too large.
  IterationMetrics complete(PendingStep& pending);
  // The validation loss into `m`, and each dataset's when data.path blends several.
  void validate_into(IterationMetrics& m);
  // The stop every rank agrees on at the end of an iteration (train/stop_agreement.h: 0 for
  // none), publishing the checkpoint written in the background once every rank has written it.
  int agree_on_control();
  CheckpointRequest checkpoint_request() const;

  Config config_;
  Layout layout_;
  int64_t vocab_;
  int64_t parameter_count_ = 0;
  torch::Device device_;
  torch::Dtype dtype_;
  std::shared_ptr<Communicator> cpu_world_;  // agreements on failures (NCCL's bootstrap on a GPU)
  std::unique_ptr<ProcessGroups> groups_;
  std::unique_ptr<GPTData> data_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::unique_ptr<CheckpointSaving> saving_;  // with checkpoints_
  ParallelModel model_;
  std::unique_ptr<StageForward> forward_;
  std::unique_ptr<ParameterGroups> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  std::optional<RunLog> log_;  // once the device, and so its peak, is known
  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;
  double last_loss_ = IterationMetrics::kUnknown;  // of the newest completed iteration (saved with it)
  LossGuard loss_guard_;
  std::optional<int64_t> resumed_unhealthy_;  // the iteration resumed from, when it was marked unhealthy
  std::unique_ptr<IterationProfile> profile_;  // during the profiled iterations (train/profile.h), on ranks that profile
  bool profiling_ = false;                     // the profiled iterations have begun in this run, on every rank
  Stopwatch since_built_;  // train.exit_after_minutes
  StragglerReport stragglers_;
  Hooks hooks_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace trident
