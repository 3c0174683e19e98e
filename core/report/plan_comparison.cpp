#include "core/report/plan_comparison.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/plan/memory.h"
#include "core/plan/planner.h"
#include "core/plan/software.h"

namespace trident {

namespace {

double median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t half = values.size() / 2;
  return values.size() % 2 ? values[half] : (values[half - 1] + values[half]) / 2;
}

}  // namespace

PlanComparison compare_with_plan(const RunRecord& record, const std::string& record_path, const MetricsRows& rows,
                                 const DeviceProfile* profile, const std::string& no_profile) {
  PlanComparison c;
  try {
    c.config = Config::parse(record.config_yaml);
  } catch (const std::exception& e) {
    fail("run record '", record_path, "': its config: ", e.what());
  }
  try {
    c.layout = resolve_layout(c.config, record.world_size);
  } catch (const std::exception& e) {
    fail("run record '", record_path, "': its config does not give a layout on ", record.world_size,
         " rank(s): ", e.what());
  }
  const int64_t vocab = c.config.model.padded_vocab(c.layout.tp_size);
  // The fused kernels ran where the run was on a GPU: the record does not say whether its build
  // had them, and a CUDA build without the toolkit's compiler (the only one without) is rare.
  const Software built = trident_software_on_libtorch(record.libtorch);
  const Software software = record.device == "cpu" ? without_fused_kernels(built) : built;
  // What the allocator holds at the peak: the estimate without its allowance for the CUDA
  // context, fragmentation and communication buffers, which train's peak does not count.
  const MemoryEstimate memory = estimate_memory(c.config.model, vocab, c.layout, c.config.precision, software);
  c.memory_gib.plan = (memory.total() - memory.allowance) / kGiB;
  c.profile = profile ? profile->name : no_profile;
  if (profile) {
    Hardware hardware;
    hardware.gpus = record.world_size;
    hardware.device = *profile;
    hardware.software = software;
    const PlanRow row = evaluate_layout(c.config, c.layout, hardware);
    c.iteration_s.plan = row.seconds();
    c.tokens_per_s.plan = row.tokens_per_s;
    c.tflops_per_device.plan = row.tflops_per_gpu;
    c.mfu.plan = row.tflops_per_gpu / profile->peak_tflops;
  }

  std::vector<const MetricsRow*> timed;
  for (const auto& [iteration, row] : rows)
    if (!std::isnan(row.tokens_per_s)) timed.push_back(&row);
  if (timed.size() > 1) timed.erase(timed.begin());
  c.measured_lines = int64_t(timed.size());
  const auto measured = [&](double MetricsRow::*field, double scale = 1) {
    std::vector<double> values;
    for (const MetricsRow* row : timed)
      if (!std::isnan(row->*field)) values.push_back(row->*field * scale);
    return median(values);
  };
  c.iteration_s.measured = measured(&MetricsRow::elapsed_ms, 1e-3);
  c.tokens_per_s.measured = measured(&MetricsRow::tokens_per_s);
  c.tflops_per_device.measured = measured(&MetricsRow::tflops_model);
  c.mfu.measured = measured(&MetricsRow::mfu);
  for (const MetricsRow* row : timed)
    if (!std::isnan(row->memory_gib))
      c.memory_gib.measured =
          std::isnan(c.memory_gib.measured) ? row->memory_gib : std::max(c.memory_gib.measured, row->memory_gib);
  return c;
}

}  // namespace trident
