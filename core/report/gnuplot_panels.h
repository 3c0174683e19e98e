// The panels plot draws of runs' metrics, as a gnuplot script: loss (training, and validation as
// points), tokens/s, TFLOP/s per device (and MFU on the right axis) and, where any run measured
// it, peak allocated GPU memory; a colour per run, and each run's planned tokens/s and memory as
// a dotted line in its colour where the plan has them.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "core/report/metrics_file.h"

namespace trident {

struct PlottedRun {
  std::string label;
  MetricsRows rows;  // placed on the axis (place_on_axis)
  double planned_tokens_per_s = NAN, planned_memory_gib = NAN;
};

enum class PictureFormat { png, svg };

std::string gnuplot_script(const std::vector<PlottedRun>& runs, MetricsAxis axis, PictureFormat format,
                           const std::string& output, const std::string& title);

// Runs gnuplot on the script; errors say when gnuplot is missing or drew nothing at `output`.
void run_gnuplot(const std::string& script, const std::string& output);

}  // namespace trident
