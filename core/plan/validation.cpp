#include "core/plan/validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "core/plan/planner.h"
#include "core/plan/published_runs.h"
#include "core/text.h"

namespace trident {

std::vector<Validation> validate_time_model() {
  std::vector<Validation> out;
  for (const ScalingRow& row : megatron_scaling_table()) {
    Hardware a100;
    a100.gpus = row.gpus;
    a100.software = megatron_2021_software();
    const Config config = scaling_row_config(row);
    const PlanRow estimate = evaluate_layout(config, resolve_layout(config, row.gpus), a100);
    out.push_back({row.name, "megatron-2021", str(row.gpus, " x ", a100.device.name), "TFLOP/s (96)", row.tflops_per_gpu,
                   estimate.hardware_tflops_per_gpu, "the terms (calibration table)", "", 0, 0, estimate.refused(), false});
  }
  Hardware h100;
  h100.gpus = 1;
  h100.device = h100_profile();
  // Measured on 2026-11-22, before trident's fused kernels and gradient-accumulation fusion.
  h100.software = without_fused_kernels(h100.software);
  h100.software.fused_gradient_accumulation = false;
  Config config = scaling_row_config(megatron_scaling_table().front());
  config.batch.micro_batch_size = 8;
  config.recompute = Recompute::none;
  const PlanRow estimate = evaluate_layout(config, resolve_layout(config, 1), h100);
  out.push_back({"1.7b", "trident", str("1 x ", h100.device.name), "TFLOP/s (72)", 448.3, estimate.tflops_per_gpu, "", "",
                 0, 0, estimate.refused()});
  for (const LlamaRun& run : llama3_runs()) {
    Hardware cluster;
    cluster.gpus = run.gpus;
    cluster.device = h100_profile();
    cluster.software = llama3_software();
    const Config llama = llama3_run_config(run);
    const Layout layout = resolve_layout(llama, run.gpus);
    TRIDENT_CHECK(layout.dp_size == run.data, run.name, " on ", run.gpus, " GPUs resolves to DP ", layout.dp_size);
    const PlanRow row = evaluate_layout(llama, layout, cluster);
    out.push_back({run.name, "llama3", str(run.gpus, " x ", cluster.device.name, ", ", describe_axes(layout)),
                   "TFLOP/s (model)", run.tflops_per_gpu, row.tflops_per_gpu, run.sets, "", 0, 0, row.refused(), false});
  }
  for (const PublishedRun& run : published_runs()) {
    Hardware cluster;
    cluster.gpus = run.gpus;
    cluster.device = run.device;
    cluster.software = run.software;
    const Layout layout = resolve_layout(run.config, run.gpus);
    const PlanRow row = evaluate_layout(run.config, layout, cluster);
    out.push_back({run.id, run.stack, str(run.gpus, " x ", run.device.name, ", ", describe_axes(layout)), "tokens/s",
                   run.tokens_per_s_per_gpu, row.tokens_per_s / double(run.gpus), run.calibrates, run.source,
                   run.peak_memory_gib, row.memory.total() / kGiB, row.refused()});
  }
  return out;
}

ErrorSummary summarize_errors(const std::vector<double>& errors) {
  ErrorSummary s;
  for (const double e : errors) s.rows += 1, s.mean += std::abs(e), s.largest = std::max(s.largest, std::abs(e));
  if (s.rows > 0) s.mean /= double(s.rows);
  return s;
}

ErrorSummary summarize_memory(const std::vector<Validation>& rows) {
  std::vector<double> errors;
  for (const Validation& r : rows)
    if (r.measured_memory_gib > 0) errors.push_back(r.estimated_memory_gib / r.measured_memory_gib - 1);
  return summarize_errors(errors);
}

std::string validation_table(const std::vector<Validation>& rows) {
  std::string out =
      "| row | stack | GPUs | per GPU | measured | estimated | error | memory GiB measured / estimated | role |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const bool held_out : {false, true})
    for (const auto& r : rows) {
      if (r.held_out() != held_out) continue;
      const std::string memory = r.measured_memory_gib > 0 ? str(fixed(r.measured_memory_gib, 1), " / ", fixed(r.estimated_memory_gib, 1))
                                 : str("- / ", fixed(r.estimated_memory_gib, 1));
      out += str("| ", r.name, " | ", r.stack, " | ", r.device, " | ", r.measure, " | ", fixed(r.measured, 1), " | ",
                 fixed(r.estimated, 1), " | ", r.error() >= 0 ? "+" : "", fixed(100 * r.error(), 1), "% | ",
                 !r.memory_checked ? std::string("not checked") : r.refused ? memory + " (does not fit)" : memory, " | ", held_out ? "held out" : "sets " + r.sets, " |\n");
    }
  std::set<std::string> stacks;
  for (const auto& r : rows) stacks.insert(r.stack);
  auto line = [](const std::string& what, const ErrorSummary& s) {
    return str(what, ": ", s.rows, " rows, mean absolute error ", fixed(100 * s.mean, 1), "%, largest ",
               fixed(100 * s.largest, 1), "%\n");
  };
  for (const bool held_out : {false, true}) {
    const char* role = held_out ? "held out" : "calibration";
    out += line(role, summarize(rows, [&](const Validation& r) { return r.held_out() == held_out; }));
    for (const std::string& stack : stacks) {
      const ErrorSummary s = summarize(rows, [&](const Validation& r) { return r.held_out() == held_out && r.stack == stack; });
      if (s.rows > 0) out += line(str("  ", role, ", ", stack), s);
    }
  }
  const auto checked = std::count_if(rows.begin(), rows.end(), [](const Validation& r) { return r.memory_checked; });
  const auto refused = std::count_if(rows.begin(), rows.end(), [](const Validation& r) { return r.memory_checked && r.refused; });
  const ErrorSummary memory = summarize_memory(rows);
  std::set<std::string> sources;
  for (const auto& r : rows)
    if (!r.source.empty()) sources.insert(r.source);
  out += "sources: Narayanan et al. 2021 (Table 1), Dubey et al. 2024 (Table 4), docs/gpu-h100 (trident), " +
         join(std::vector<std::string>(sources.begin(), sources.end()), ", ") + "\n";
  return out + str(refused, " of ", checked, " layouts that ran answered \"does not fit\"; peak memory published for ",
                   memory.rows, ": estimates off by ", fixed(100 * memory.mean, 1), "% on average, ", fixed(100 * memory.largest, 1),
                   "% at most\n");
}

}  // namespace trident
