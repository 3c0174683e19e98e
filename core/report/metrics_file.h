// A run's metrics file (train.metrics_file, one JSON object per logged iteration) read back for
// pictures and reports, each line placed on an axis: iterations, tokens or seconds of training.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

namespace trident {

struct MetricsRow {
  double loss = NAN, valid_loss = NAN, tokens_per_s = NAN, tflops_6pd = NAN, tflops_model = NAN, mfu = NAN,
         elapsed_ms = NAN, memory_gib = NAN;
  double x = NAN;  // on the chosen axis (place_on_axis)
};
using MetricsRows = std::map<int64_t, MetricsRow>;  // by iteration

// The file's lines by iteration. A resumed run appends to its metrics file, so an iteration can
// appear twice (after a restart from an earlier checkpoint): the later line wins. An incomplete
// last line (a run killed while writing) is skipped with a warning; any other malformed line is
// an error naming its number, and so is a file without iterations.
MetricsRows read_metrics_file(const std::string& path);

enum class MetricsAxis { iteration, tokens, time };
MetricsAxis metrics_axis(const std::string& name);  // "iteration", "tokens" or "time"

// Each row's x. Tokens and time grow by a line's rate (tokens/s x iteration time, or the
// iteration time) over the iterations since the line before; a line without one (a validation
// between log lines) takes the rate of the next line that has one, or of the last. Fails naming
// `path` when no line gives the rate.
void place_on_axis(MetricsRows& rows, MetricsAxis axis, const std::string& path);

bool any_value(const MetricsRows& rows, double MetricsRow::*field);

}  // namespace trident
