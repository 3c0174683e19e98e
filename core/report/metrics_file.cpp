#include "core/report/metrics_file.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/files.h"

namespace trident {

namespace {

double number_or_nan(const nlohmann::json& line, const char* key) {
  const auto found = line.find(key);
  return found != line.end() && found->is_number() ? found->get<double>() : NAN;
}

}  // namespace

MetricsRows read_metrics_file(const std::string& path) {
  std::istringstream in(read_text_file(path, "metrics file"));
  MetricsRows rows;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.empty()) continue;
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_discarded() || !line.contains("iteration")) {
      if (in.peek() == EOF) {
        std::fprintf(stderr, "warning: line %lld of '%s' is incomplete (a run stopped while writing it): skipped\n",
                     static_cast<long long>(number), path.c_str());
        break;
      }
      fail("metrics file '", path, "' line ", number, " is not a JSON object with an iteration");
    }
    MetricsRow& row = rows[line.at("iteration").get<int64_t>()] = {};
    row.loss = number_or_nan(line, "loss");
    row.valid_loss = number_or_nan(line, "valid_loss");
    row.tokens_per_s = number_or_nan(line, "tokens_per_s");
    row.tflops_6pd = number_or_nan(line, "tflops_6pd");
    row.tflops_model = number_or_nan(line, "tflops_model");
    row.mfu = number_or_nan(line, "mfu");
    row.elapsed_ms = number_or_nan(line, "elapsed_ms");
    row.memory_gib = number_or_nan(line, "memory/peak_allocated_gib");
  }
  if (rows.empty()) fail("metrics file '", path, "' holds no iterations");
  return rows;
}

MetricsAxis metrics_axis(const std::string& name) {
  if (name == "iteration") return MetricsAxis::iteration;
  if (name == "tokens") return MetricsAxis::tokens;
  if (name == "time") return MetricsAxis::time;
  fail("metrics axis '", name, "': expected iteration, tokens or time");
}

void place_on_axis(MetricsRows& rows, MetricsAxis axis, const std::string& path) {
  if (axis == MetricsAxis::iteration) {
    for (auto& [iteration, row] : rows) row.x = double(iteration);
    return;
  }
  const auto per_iteration = [&](const MetricsRow& row) {
    const double seconds = row.elapsed_ms / 1000;
    return axis == MetricsAxis::time ? seconds : row.tokens_per_s * seconds;
  };
  double last_rate = NAN;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it)
    if (!std::isnan(per_iteration(it->second))) {
      last_rate = per_iteration(it->second);
      break;
    }
  if (std::isnan(last_rate))
    fail("metrics file '", path, "' has no ", axis == MetricsAxis::time ? "elapsed_ms" : "tokens_per_s and elapsed_ms",
         " to place its lines by ", axis == MetricsAxis::time ? "time" : "tokens", ": use --x iteration");
  double x = 0;
  int64_t previous = 0;
  for (auto it = rows.begin(); it != rows.end(); ++it) {
    double rate = last_rate;
    for (auto next = it; next != rows.end(); ++next)
      if (!std::isnan(per_iteration(next->second))) {
        rate = per_iteration(next->second);
        break;
      }
    x += double(it->first - previous) * rate;
    previous = it->first;
    it->second.x = x;
  }
}

bool any_value(const MetricsRows& rows, double MetricsRow::*field) {
  for (const auto& [iteration, row] : rows)
    if (!std::isnan(row.*field)) return true;
  return false;
}

}  // namespace trident
