#include "train/profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/text.h"
#include "train/device.h"

namespace trident {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// With input shapes, scripts/kernel_sources.py names the operator and shapes behind a kernel.
ProfilerConfig kineto_config(bool input_shapes) {
  return ProfilerConfig(ProfilerState::KINETO, input_shapes, /*profile_memory=*/false, /*with_stack=*/false);
}

double event_ms(const profiler::KinetoEvent& event) {
#if TORCH_VERSION_MAJOR >= 2
  return double(event.durationNs()) / 1e6;
#else
  return double(event.durationUs()) / 1e3;
#endif
}

// The events of `result` that say where the time went: GPU kernels on CUDA, operators on the CPU;
// by name, the most time first.
std::string time_table(const profiler::ProfilerResult& result, bool cuda, int rank, const std::string& iterations) {
  struct Total {
    double ms = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Total> by_name;
  double all = 0;
  for (const auto& event : result.events()) {
    if ((event.deviceType() == c10::DeviceType::CUDA) != cuda) continue;
    Total& total = by_name[event.name()];
    total.ms += event_ms(event);
    total.calls += 1;
    all += event_ms(event);
  }
  std::vector<std::pair<std::string, Total>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::string table = str("rank ", rank, ", ", iterations, ": ",
                          cuda ? "GPU kernels by total time" : "operators by total time (callers include callees)",
                          ", ", rows.size(), " names\n");
  char line[512];
  std::snprintf(line, sizeof line, "%10s %7s %7s  %s\n", "ms", "share", "calls", "name");
  table += line;
  for (size_t i = 0; i < rows.size() && i < 25; ++i) {
    const auto& [name, total] = rows[i];
    // On the CPU an operator's time holds its callees' too: shares of the sum would mislead.
    const std::string share = cuda && all > 0 ? str(fixed(100 * total.ms / all, 1), "%") : "-";
    std::snprintf(line, sizeof line, "%10.3f %7s %7lld  %.200s\n", total.ms, share.c_str(),
                  static_cast<long long>(total.calls), name.c_str());
    table += line;
  }
  return table;
}

}  // namespace

void check_profile_settings(const TrainConfig& train, int64_t world_size) {
  if (train.profile_iteration == 0) {
    if (train.profile_iterations != 1)
      fail("train.profile_iterations=", train.profile_iterations,
           " needs train.profile_iteration, the first iteration to profile (0: none)");
    return;
  }
  for (const int64_t rank : profile_ranks(train.profile_ranks))
    if (rank >= world_size)
      fail("train.profile_ranks=", train.profile_ranks, " names rank ", rank, ", but the job has ", world_size,
           " process(es): ranks 0 to ", world_size - 1);
  if (train.profile_iteration > train.iters)
    fail("train.profile_iteration=", train.profile_iteration, " is past train.iters=", train.iters,
         ": no iteration would be profiled");
  if (train.profile_iterations > train.iters - train.profile_iteration + 1)  // past the end (no overflow)
    fail("train.profile_iterations=", train.profile_iterations, " from train.profile_iteration=",
         train.profile_iteration, " end past train.iters=", train.iters);
#if TORCH_VERSION_MAJOR < 2
  fail("train.profile_iteration=", train.profile_iteration, " needs a LibTorch whose profiler writes traces (Kineto): ",
       "pip's torch 2.x has it, this LibTorch ", TORCH_VERSION, " does not");
#endif
}

int64_t last_profiled_iteration(const TrainConfig& train) {
  return train.profile_iteration + train.profile_iterations - 1;
}

std::string profiled_iterations(const TrainConfig& train) {
  return train.profile_iterations == 1
             ? str("iteration ", train.profile_iteration)
             : str("iterations ", train.profile_iteration, " to ", last_profiled_iteration(train));
}

std::string resumed_inside_profile(const TrainConfig& train, int64_t resumed_at) {
  if (train.profile_iteration == 0 || resumed_at < train.profile_iteration ||
      resumed_at >= last_profiled_iteration(train))
    return "";
  return str("train.profile_iteration=", train.profile_iteration, ": this run resumes after iteration ", resumed_at,
             ", inside the profiled ", profiled_iterations(train), ", so nothing is profiled");
}

bool profiles_rank(const TrainConfig& train, int64_t rank) {
  const std::vector<int64_t> ranks = profile_ranks(train.profile_ranks);
  return ranks.empty() || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

IterationProfile::IterationProfile(const torch::Device& device, bool input_shapes) : device_(device) {
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  profiler::prepareProfiler(kineto_config(input_shapes), activities);
  profiler::enableProfiler(kineto_config(input_shapes), activities);
}

IterationProfile::~IterationProfile() {
  if (recording_) try {
      (void)profiler::disableProfiler();
    } catch (...) {  // the error that ended the iteration is the one to report
    }
}

std::string IterationProfile::finish(const std::string& dir, int rank, const std::string& iterations) {
  synchronize(device_);
  recording_ = false;
  const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  std::filesystem::create_directories(dir);
  const std::string stem = str(dir, "/rank", rank);
  try {
    result->save(stem + ".json");
  } catch (const c10::Error& e) {
    fail("train.profile_dir: could not write the trace ", stem, ".json: ", e.what_without_backtrace());
  }
  const std::string table = time_table(*result, device_.is_cuda(), rank, iterations);
  write_text_file(stem + ".txt", table);
  return table;
}

}  // namespace trident
