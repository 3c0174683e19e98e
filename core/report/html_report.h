// plot --html: one self-contained page of runs, to read in a browser: per run, what ran (device,
// ranks, layout, the resolved config) and its plan beside its measurements; then the panels of
// every run together (gnuplot's SVG, inline).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/report/metrics_file.h"
#include "core/report/plan_comparison.h"
#include "core/report/run_record.h"

namespace trident {

struct ReportedRun {
  std::string label, metrics_path;
  const MetricsRows* rows = nullptr;
  std::optional<RunRecord> record;  // absent: `no_record` says why (a run written before records)
  std::string no_record;
  std::optional<PlanComparison> comparison;  // with the record
};

std::string html_report(const std::string& title, const std::vector<ReportedRun>& runs, const std::string& svg);

}  // namespace trident
