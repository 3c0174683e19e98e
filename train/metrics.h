// What a training run reports: the lines at its start, the memory line after its first
// iteration, a line per logged iteration (rank 0 speaks), and the metrics file, one JSON object
// per iteration.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "core/plan/flops.h"
#include "train/device.h"
#include "train/straggler_report.h"

namespace trident {

struct StateMemory;
class TensorBoardWriter;

struct IterationMetrics {
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  int64_t iteration = 0;         // completed iterations, counting this one
  int64_t consumed_samples = 0;  // after this iteration
  double loss = 0;
  // Each declared auxiliary loss's share of the objective (model/auxiliary_loss.h), beside `loss`.
  std::vector<std::pair<std::string, double>> auxiliary_losses;
  // A Mixture-of-Experts model's load over its experts (train/expert_balance.h), as moe/<name>.
  std::vector<std::pair<std::string, double>> expert_balance;
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
  double valid_loss = kUnknown;  // set on validation iterations (a blend's: weighed as it is)
  std::vector<std::pair<std::string, double>> valid_losses;  // each dataset's, when data.path blends several
  int64_t max_in_flight = 0;     // this rank's pipeline stage: peak micro-batches held
  double pipeline_transfer_ms = 0;  // this rank's time in pipeline exchanges
  // At a logged iteration of a job of several ranks, the straggler report's figures since the
  // last one (train/straggler_report.h), as straggler/<name>.
  std::optional<StragglerFigures> stragglers;
  // At a logged iteration on a GPU, the allocator's peak since the last one and what it holds
  // (train/device.h), as memory/<name> in GiB.
  std::optional<AllocatorStats> memory;
  // A program's own values (Hooks::after_step), logged after the others under these names; every
  // rank's, once gathered (train/program_scalars.h).
  std::vector<std::pair<std::string, double>> scalars;
};

// Fails naming a name of m.scalars that is empty, repeated, or one the metrics file uses already.
void check_scalar_names(const IterationMetrics& m);

class RunLog {
 public:
  // `vocab`: the padded vocabulary the model holds; `peak_tflops`: the device's, 0 if unknown
  // (no MFU then).
  RunLog(const Config& config, const Layout& layout, int64_t vocab, double peak_tflops);
  ~RunLog();

  // Tokens per second, TFLOPS per device (6PD, Megatron's model and hardware formulas) and MFU
  // of an iteration from its elapsed time.
  void add_rates(IterationMetrics& m) const;

  // `parameters`: the model's as built.
  void start(const std::string& backend, const torch::Device& device, int64_t parameters,
             const std::string& data) const;
  // The states this rank holds (counted) beside the planner's estimate; on a GPU the
  // allocator's peak over the first iteration, of which the activations are the part beyond.
  void memory(const StateMemory& held, const torch::Device& device) const;
  void iteration(const IterationMetrics& m) const;
  // What the time model expects of this layout on this device (the job's tokens/s, as the
  // iterations log them, and model TFLOP/s per GPU): said at the start, and from the third
  // logged iteration on a run under half of it is warned about once.
  void expect_throughput(double tokens_per_s, double tflops, std::string device);

  // On rank 0, train.metrics_file (continued by a run resumed after iteration `resumed_at` > 0,
  // else started anew) with the run record beside it (core/report/run_record.h: the resolved
  // config, `backend`, `device` and `parameters`, for plot --html), and train.tensorboard_dir (a
  // new event file, TensorBoard told of the resumption). Error naming the key when one cannot be
  // opened; a later failed write is one warning and ends that record.
  void open_metrics(int64_t resumed_at, const std::string& backend, const torch::Device& device, int64_t parameters);
  // The iteration's values into both, under the same names.
  void record(const IterationMetrics& m);

 private:
  Config config_;
  Layout layout_;
  int64_t vocab_;
  double peak_tflops_;
  IterationFlops flops_;
  double expected_tokens_per_s_ = 0, expected_tflops_ = 0;
  std::string device_;
  mutable int64_t logged_ = 0;
  mutable bool warned_ = false;
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;

  struct Value {
    std::string name;
    double value;
    bool integer;  // written as an integer into the metrics file
  };
  std::vector<Value> values(const IterationMetrics& m) const;
};

}  // namespace trident
