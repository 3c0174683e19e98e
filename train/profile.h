// train.profile_iteration: LibTorch's profiler (Kineto) over train.profile_iterations training
// iterations from that one on (one by default), on the ranks of train.profile_ranks (every rank
// by default), with the operators' input shapes unless train.profile_shapes is false. Each of
// them writes, in train.profile_dir, rank<R>.json, one trace of those iterations to open in
// Perfetto or chrome://tracing, and rank<R>.txt, where their time went: on CUDA the GPU kernels
// by their total time (one stream's kernels do not overlap, so the shares add up), on the CPU
// LibTorch's operators by their total time (an operator's time includes those it calls).
#pragma once

#include <torch/types.h>

#include <string>

#include "core/config.h"

namespace trident {

// Fails naming train.profile_iteration when it is past train.iters (nothing would be profiled)
// or this LibTorch cannot write traces (one built without Kineto, as Debian's 1.13 is),
// train.profile_iterations when they end past train.iters, and train.profile_ranks when it names
// a rank the job of `world_size` does not have.
void check_profile_settings(const TrainConfig& train, int64_t world_size);

// Whether `rank` profiles.
bool profiles_rank(const TrainConfig& train, int64_t rank);
// The iterations profiled: "iteration 2", "iterations 2 to 4".
std::string profiled_iterations(const TrainConfig& train);
int64_t last_profiled_iteration(const TrainConfig& train);
// For a run resumed after iteration `resumed_at` inside the profiled iterations (which then
// never begin): a warning that nothing is profiled; else "".
std::string resumed_inside_profile(const TrainConfig& train, int64_t resumed_at);

class IterationProfile {
 public:
  IterationProfile(const torch::Device& device, bool input_shapes);  // starts recording
  IterationProfile(const IterationProfile&) = delete;
  IterationProfile& operator=(const IterationProfile&) = delete;
  ~IterationProfile();  // stops recording if finish() did not
  // Waits for the device, stops recording and writes `rank`'s trace and table of `iterations`
  // (profiled_iterations) into `dir` (made if missing); returns the table.
  std::string finish(const std::string& dir, int rank, const std::string& iterations);

 private:
  torch::Device device_;
  bool recording_ = true;
};

}  // namespace trident
