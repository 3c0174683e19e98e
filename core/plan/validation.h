// The time and memory models against published measurements, each run planned at its own
// layout on its own device with its own software: Megatron's A100 scaling table (TFLOP/s per GPU
// counting the recomputed forward, as the table does), trident's 1.7B row on one H100 (model
// FLOPs), Llama 3's runs (model FLOPs) and the published runs of core/plan/published_runs.h
// (tokens per second per GPU, and peak memory where published). Rows that set a constant are
// calibration, the rest held out.
#pragma once

#include <string>
#include <vector>

namespace trident {

struct Validation {
  std::string name, stack, device, measure;  // measure: "TFLOP/s (96)", "tokens/s", ...
  double measured = 0, estimated = 0;
  std::string sets;    // what this row set: a profile constant, the model's terms; "" held out
  std::string source;  // where a published run's numbers are; "" for the tables named beside the rows
  double measured_memory_gib = 0, estimated_memory_gib = 0;  // 0 where not published
  // The memory model does not refuse the run's layout (near the edge is not refused); not checked
  // where the run's memory depends on what is not published (Llama 3's schedule, whose
  // micro-batches in flight the paper does not give; Megatron's 2021 table, whose runs fit by
  // construction of the rows' layouts and are checked by Plan.ReproducesTheMegatronScalingTable).
  bool refused = false, memory_checked = true;
  double error() const { return estimated / measured - 1; }
  bool held_out() const { return sets.empty(); }
};
std::vector<Validation> validate_time_model();

// The rows, calibration first and held-out after, and per stack and role the mean and largest
// absolute error.
std::string validation_table(const std::vector<Validation>& rows);

// The mean and largest absolute value of relative errors.
struct ErrorSummary {
  size_t rows = 0;
  double mean = 0, largest = 0;
};
ErrorSummary summarize_errors(const std::vector<double>& errors);
// The time errors of `rows` passing `keep`.
template <typename Keep>
ErrorSummary summarize(const std::vector<Validation>& rows, Keep keep) {
  std::vector<double> errors;
  for (const Validation& r : rows)
    if (keep(r)) errors.push_back(r.error());
  return summarize_errors(errors);
}

// The memory estimates against the published peaks: mean and largest |estimated / measured - 1|.
ErrorSummary summarize_memory(const std::vector<Validation>& rows);

}  // namespace trident
