// A run's plan beside what it measured: the planner's estimate of the run's own layout on its
// device (core/plan: the time model with the device's profile, the memory model) and the steady
// iterations of its metrics file.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/layout.h"
#include "core/plan/device_profile.h"
#include "core/report/metrics_file.h"
#include "core/report/run_record.h"

namespace trident {

struct PlannedAndMeasured {
  double plan = NAN, measured = NAN;  // NaN: not predicted, not measured
};

struct PlanComparison {
  Config config;
  Layout layout;
  // The profile the time came from, or, when there is none, why the plan has no times.
  std::string profile;
  // memory_gib: the peak the allocator holds (train's memory/peak_allocated_gib on a GPU).
  PlannedAndMeasured iteration_s, tokens_per_s, tflops_per_device, mfu, memory_gib;
  // The iterations the measurements are the median of (memory: the largest): the logged lines
  // with a rate but the first, which holds the warm-up (the only one, when it is alone).
  int64_t measured_lines = 0;
};

// `profile`: the device's (plot --profile, else the built-in one for record.device), or nullptr
// for none (then `no_profile` says why, and the plan has memory only). Errors name the record
// when its config does not load or its layout does not fit its ranks.
PlanComparison compare_with_plan(const RunRecord& record, const std::string& record_path, const MetricsRows& rows,
                                 const DeviceProfile* profile, const std::string& no_profile);

}  // namespace trident
