#include "core/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/error.h"
#include "core/flops.h"
#include "core/json_line.h"
#include "core/text.h"

namespace trident {
namespace {

// Time of an all-reduce of `bytes` over n ranks at `bandwidth` GB/s (ring: 2(n-1)/n of the data).
double all_reduce_seconds(double bytes, int64_t n, double bandwidth) {
  return n <= 1 ? 0 : 2.0 * double(n - 1) / double(n) * bytes / (bandwidth * 1e9);
}

std::string describe(const Layout& l) {
  return str(describe_axes(l), ", micro-batch ", l.micro_batch,
             ", recompute ", l.recompute);
}

}  // namespace

std::optional<Layout> candidate(const Config& config, int64_t gpus, int64_t tp_size, int64_t cp_size,
                                int64_t pp_size, int64_t micro_batch, Recompute recompute) {
  Config c = config;
  c.parallel.tensor = tp_size;
  c.parallel.context = cp_size;
  c.parallel.pipeline = pp_size;
  c.parallel.data = 0;
  c.batch.micro_batch_size = micro_batch;
  c.recompute = recompute;
  if (!layout_problem(c, gpus).empty()) return std::nullopt;
  return resolve_layout(c, gpus);
}

PlanRow evaluate_layout(const Config& config, const Layout& layout, const Hardware& hw) {
  const auto& m = config.model;
  const int64_t vocab = m.padded_vocab(layout.tp_size);
  PlanRow row;
  row.layout = layout;
  row.memory = estimate_memory(m, vocab, layout, config.precision);
  row.fits = row.memory.total() <= hw.memory_gib * kGiB;

  const int64_t gpus = layout.world_size();
  const IterationFlops flops =
      iteration_flops(m, vocab, config.batch.global_batch_size, layout.recompute);
  row.compute_s = flops.hardware / (double(gpus) * hw.peak_tflops * 1e12 * hw.efficiency);
  row.bubble_s = row.compute_s * double(layout.pp_size - 1) /
                 double(layout.virtual_stages * layout.micro_batches);

  // Per micro-batch and layer: 2 all-reduces forward and 2 backward of s/c b h 16-bit values
  // (all-gather + reduce-scatter with sequence parallelism: the same volume), 2 more with full
  // recompute. TP stays inside a node.
  const double local_tokens = double(m.seq_length / layout.cp_size * layout.micro_batch);
  const double activation_bytes = 2.0 * local_tokens * double(m.hidden_size);
  const double layer_passes = double(m.num_layers / layout.pp_size * layout.micro_batches);
  const double per_layer = layout.recompute == Recompute::full ? 6 : 4;
  row.tensor_comm_s = per_layer * layer_passes * all_reduce_seconds(activation_bytes, layout.tp_size, hw.intra_node_gbs);

  // Ring attention, per micro-batch and layer: forward passes this rank's K and V blocks
  // (2 s/c b h/t 16-bit values) c - 1 times, backward c - 1 times again and their gradients c
  // times: 3c - 2 block transfers. Each transfer hides behind one step's block attention
  // (4 (s/c)^2 b h/t FLOPs forward, twice that backward, over 3 passes: 4 (s/c)^2 b h/t each),
  // so only what exceeds it is counted.
  if (layout.cp_size > 1) {
    const double c = double(layout.cp_size), t = double(layout.tp_size);
    const bool inside_node = layout.tp_size * layout.cp_size <= hw.gpus_per_node;
    const double block_bytes = 2.0 * 2.0 * local_tokens * double(m.hidden_size) / t;
    const double transfer_s = block_bytes / ((inside_node ? hw.intra_node_gbs : hw.inter_node_gbs) * 1e9);
    const double block_flops = 4.0 * local_tokens * double(m.seq_length / layout.cp_size) * double(m.hidden_size) / t;
    const double block_s = block_flops / (hw.peak_tflops * 1e12 * hw.efficiency);
    row.context_comm_s = (3 * c - 2) * std::max(0.0, transfer_s - block_s) * layer_passes;
  }

  // Gradients (fp32) all-reduced once per iteration over the data- and context-parallel ranks
  // (stage 1: reduce-scattered, the weights all-gathered: as many bytes); they cross nodes once
  // TP x CP x DP does. ZeRO-2 and 3 reduce-scatter every micro-batch's gradients (half an
  // all-reduce, M times), and ZeRO-3 all-gathers the 16-bit weights for every micro-batch's
  // forward and again for its backward (2M half all-reduces).
  const int64_t replicas = layout.dp_size * layout.cp_size;
  const bool dp_inside_node = layout.tp_size * replicas <= hw.gpus_per_node;
  const double dp_gbs = dp_inside_node ? hw.intra_node_gbs : hw.inter_node_gbs;
  const double micro_batches = double(layout.micro_batches);
  const double grad_bytes = state_bytes(config.precision).grads * row.memory.parameters;
  row.data_comm_s = layout.zero_stage >= 2 ? micro_batches * all_reduce_seconds(grad_bytes, replicas, dp_gbs) / 2
                                           : all_reduce_seconds(grad_bytes, replicas, dp_gbs);
  if (layout.zero_stage == 3)
    row.data_comm_s += 2 * micro_batches *
                       all_reduce_seconds(state_bytes(config.precision).weights * row.memory.parameters, replicas, dp_gbs) / 2;
  // Offload: this rank's shard of fp32 gradients goes to the host and its 16-bit weights come
  // back once per iteration, and the CPU runs AdamW over the shard.
  if (layout.offload) {
    const double shard = row.memory.parameters / double(layout.zero_stage >= 1 ? replicas : 1);
    row.offload_s = shard * (4.0 + 2.0) / (hw.host_link_gbs * 1e9) + shard / hw.host_adam_params_per_s;
  }
  // Activations and their gradients cross each stage boundary once per micro-batch.
  if (layout.pp_size > 1) {
    const bool stages_inside_node = gpus <= hw.gpus_per_node;
    const double bytes = activation_bytes / double(layout.sequence_parallel ? layout.tp_size : 1);
    row.pipeline_comm_s = 2.0 * double(layout.micro_batches) * bytes /
                          ((stages_inside_node ? hw.intra_node_gbs : hw.inter_node_gbs) * 1e9);
  }
  row.tflops_per_gpu = flops.model / (row.seconds() * double(gpus)) / 1e12;
  return row;
}

Plan make_plan(const Config& config, const Hardware& hw) {
  const auto& m = config.model;
  const int64_t global = config.batch.global_batch_size;
  Plan plan;
  plan.hardware = hw;
  plan.parameters = double(gpt_parameter_count(m, m.padded_vocab()));

  auto shape = [&](int64_t tp, int64_t cp, int64_t pp, int64_t micro, Recompute recompute) {
    return candidate(config, hw.gpus, tp, cp, pp, micro, recompute);
  };

  for (int64_t tp = 1; tp <= hw.gpus_per_node; tp *= 2)
    for (int64_t cp = 1; cp <= hw.gpus / tp; cp *= 2)
      for (int64_t pp = 1; pp <= m.num_layers; ++pp)
        for (int64_t micro = 1; micro <= global; micro *= 2)
          for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
            if (auto l = shape(tp, cp, pp, micro, recompute)) {
              PlanRow row = evaluate_layout(config, *l, hw);
              if (row.fits) plan.ranked.push_back(row);
            }
  std::sort(plan.ranked.begin(), plan.ranked.end(),
            [](const PlanRow& a, const PlanRow& b) { return a.seconds() < b.seconds(); });

  // The rule of thumb, for the config's own micro-batch size and recompute.
  const double memory = hw.memory_gib * kGiB;
  const double states = plan.parameters * 18;
  const int64_t micro = config.batch.micro_batch_size;
  auto& why = plan.reasoning;
  auto take = [&](int64_t tp, int64_t cp, int64_t pp) {
    auto l = shape(tp, cp, pp, micro, config.recompute);
    if (!l) return false;
    PlanRow row = evaluate_layout(config, *l, hw);
    if (!row.fits) return false;
    plan.recommended = row;
    return true;
  };
  if (states < 0.75 * memory) {
    why.push_back(str("parameters x 18 B = ", si_units(states), "B < 75% of ", hw.memory_gib,
                      " GiB: no model parallelism, data parallelism over all ", hw.gpus, " GPUs"));
    if (!take(1, 1, 1)) why.push_back("but TP 1 x PP 1 does not divide the batch or fit; searching");
  } else {
    why.push_back(str("parameters x 18 B = ", si_units(states), "B >= 75% of ", hw.memory_gib,
                      " GiB: model parallelism needed"));
  }
  if (!plan.recommended) {
    int64_t widest = 1;
    for (int64_t tp = 1; tp <= hw.gpus_per_node && !plan.recommended; tp *= 2) {
      if (shape(tp, 1, 1, micro, config.recompute)) widest = tp;
      if (take(tp, 1, 1)) why.push_back(str("TP ", tp, " is the smallest tensor parallelism that fits"));
    }
    if (m.seq_length >= kLongSequence)
      for (int64_t cp = 2; cp <= hw.gpus / widest && !plan.recommended; cp *= 2)
        if (take(widest, cp, 1))
          why.push_back(str("sequence ", m.seq_length, " >= ", kLongSequence, ": TP ", widest, " and CP ", cp,
                            ", the smallest context parallelism that fits"));
    for (int64_t pp = 2; pp <= m.num_layers && !plan.recommended; ++pp)
      if (take(widest, 1, pp))
        why.push_back(str("no TP within a node (<= ", hw.gpus_per_node, ") fits: TP ", widest,
                          " and PP ", pp, ", the smallest pipeline depth that fits"));
  }
  if (!plan.recommended) {
    why.push_back(str("no layout with micro-batch ", micro, " and recompute=", config.recompute,
                      " fits in ", hw.memory_gib, " GiB on ", hw.gpus, " GPUs"));
  } else {
    const Layout& l = plan.recommended->layout;
    why.push_back("recommended: " + describe(l));
    if (l.pp_size > 1 && l.micro_batches < 4 * l.pp_size)
      why.push_back(str("warning: global / (micro batch x DP) = ", l.micro_batches,
                        " micro-batches for ", l.pp_size, " stages: the pipeline bubble (p-1)/M is ",
                        int(100.0 * double(l.pp_size - 1) / double(l.micro_batches)), "%"));
  }
  return plan;
}

const std::vector<ScalingRow>& megatron_scaling_table() {
  static const std::vector<ScalingRow> rows = {
      {"1.7b", 1.7, 24, 2304, 24, 1, 1, 32, 16, 512, 137},
      {"3.6b", 3.6, 32, 3072, 30, 2, 1, 64, 16, 512, 138},
      {"7.5b", 7.5, 32, 4096, 36, 4, 1, 128, 16, 512, 142},
      {"18b", 18.4, 48, 6144, 40, 8, 1, 256, 8, 1024, 135},
      {"39b", 39.1, 64, 8192, 48, 8, 2, 512, 4, 1536, 138},
      {"76b", 76.1, 80, 10240, 60, 8, 4, 1024, 2, 1792, 140},
      {"145b", 145.6, 96, 12288, 80, 8, 8, 1536, 2, 2304, 148},
      {"310b", 310.1, 128, 16384, 96, 8, 16, 1920, 1, 2160, 155},
      {"530b", 529.6, 128, 20480, 105, 8, 35, 2520, 1, 2520, 163},
      {"1t", 1008.0, 160, 25600, 128, 8, 64, 3072, 1, 3072, 163},
  };
  return rows;
}

Config scaling_row_config(const ScalingRow& row) {
  return Config::parse("", {str("model.num_layers=", row.layers), str("model.hidden_size=", row.hidden),
                            str("model.num_attention_heads=", row.heads), "model.seq_length=2048",
                            "model.vocab_size=51200", str("parallel.tensor=", row.tensor),
                            str("parallel.pipeline=", row.pipeline),
                            str("batch.micro_batch_size=", row.micro_batch),
                            str("batch.global_batch_size=", row.global_batch), "precision=bf16",
                            "recompute=full", "data.type=synthetic"});
}

std::string compare_with_row(const Plan& plan, const ScalingRow& row, const Config& config) {
  const auto published = candidate(config, row.gpus, row.tensor, 1, row.pipeline, row.micro_batch, config.recompute);
  if (!published) return str("Megatron's TP ", row.tensor, " x PP ", row.pipeline, " does not fit this config");
  const PlanRow theirs = evaluate_layout(config, *published, plan.hardware);
  const std::string table = str("Megatron's TP ", row.tensor, " x PP ", row.pipeline, " needs ",
                                int(theirs.memory.total() / kGiB), " GiB");
  if (!plan.recommended) return table + "; the rule of thumb found no layout that fits";
  const Layout& ours = plan.recommended->layout;
  if (ours.tp_size == row.tensor && ours.pp_size == row.pipeline)
    return table + ": the rule of thumb picks the same TP and PP";
  return str(table, theirs.fits ? " and fits too" : " and does not fit",
             "; the rule of thumb stops at the smallest layout that fits, TP ", ours.tp_size, " x PP ",
             ours.pp_size, " (", int(plan.recommended->memory.total() / kGiB), " GiB)");
}

std::string plan_table(const Plan& plan, size_t max_rows) {
  std::string out = str("# ", plan.hardware.gpus, " GPUs (", plan.hardware.gpus_per_node, " per node, ",
                        plan.hardware.memory_gib, " GiB, ", plan.hardware.peak_tflops,
                        " TFLOP/s peak at ", 100 * plan.hardware.efficiency, "% efficiency), ",
                        si_units(plan.parameters), " parameters\n");
  for (const auto& line : plan.reasoning) out += "# " + line + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%4s %4s %4s %5s %5s %4s %-9s %9s %9s %9s %8s %8s %8s %8s %8s %9s\n", "TP",
                "CP", "PP", "DP", "micro", "M", "recompute", "mem(GiB)", "act(GiB)", "iter(s)", "bubble",
                "tp-comm", "cp-comm", "dp-comm", "pp-comm", "TFLOPS/GPU");
  out += line;
  auto row_line = [&](const PlanRow& r, const char* mark) {
    const auto& l = r.layout;
    std::snprintf(line, sizeof line,
                  "%4lld %4lld %4lld %5lld %5lld %4lld %-9s %9.1f %9.1f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.1f%s\n",
                  (long long)l.tp_size, (long long)l.cp_size, (long long)l.pp_size, (long long)l.dp_size,
                  (long long)l.micro_batch, (long long)l.micro_batches, name(l.recompute),
                  r.memory.total() / kGiB, r.memory.activations / kGiB, r.seconds(), r.bubble_s,
                  r.tensor_comm_s, r.context_comm_s, r.data_comm_s, r.pipeline_comm_s, r.tflops_per_gpu, mark);
    out += line;
  };
  if (plan.recommended) row_line(*plan.recommended, "  <- rule of thumb");
  for (size_t i = 0; i < plan.ranked.size() && i < max_rows; ++i) row_line(plan.ranked[i], "");
  return out;
}

std::string describe_row(const PlanRow& r) {
  const auto& m = r.memory;
  char time[256];
  std::snprintf(time, sizeof time,
                "iteration time (estimate): %.3g s = compute %.3g + bubble %.3g + TP %.3g + CP %.3g + DP %.3g + "
                "PP %.3g; %.3g TFLOPS per GPU",
                r.seconds(), r.compute_s, r.bubble_s, r.tensor_comm_s, r.context_comm_s, r.data_comm_s,
                r.pipeline_comm_s, r.tflops_per_gpu);
  return str("memory per GPU (estimate): weights ", binary_bytes(m.weights), ", grads ",
             binary_bytes(m.grads), ", optimizer ", binary_bytes(m.optimizer), ", activations ",
             binary_bytes(m.activations), ", allowance ", binary_bytes(m.allowance), ", total ",
             binary_bytes(m.total()), " (", si_units(m.parameters),
             " parameters on the busiest rank)\n", time);
}

std::string plan_json(const Plan& plan) {
  auto row_json = [](const PlanRow& r) {
    const auto& l = r.layout;
    JsonLine j;
    j.add("tensor", l.tp_size).add("context", l.cp_size).add("pipeline", l.pp_size).add("data", l.dp_size)
        .add("micro_batch", l.micro_batch).add("micro_batches", l.micro_batches)
        .add("sequence_parallel", int64_t(l.sequence_parallel)).add("recompute", std::string(name(l.recompute)))
        .add("memory_bytes", r.memory.total()).add("weights_bytes", r.memory.weights)
        .add("grads_bytes", r.memory.grads).add("optimizer_bytes", r.memory.optimizer)
        .add("activations_bytes", r.memory.activations).add("allowance_bytes", r.memory.allowance)
        .add("iteration_s", r.seconds()).add("compute_s", r.compute_s).add("bubble_s", r.bubble_s)
        .add("tensor_comm_s", r.tensor_comm_s).add("context_comm_s", r.context_comm_s).add("data_comm_s", r.data_comm_s)
        .add("pipeline_comm_s", r.pipeline_comm_s).add("tflops_per_gpu", r.tflops_per_gpu);
    return j.str();
  };
  std::string out = str("{\"parameters\": ", plan.parameters, ", \"recommended\": ",
                        plan.recommended ? row_json(*plan.recommended) : std::string("null"),
                        ", \"reasoning\": [");
  for (size_t i = 0; i < plan.reasoning.size(); ++i)
    out += (i ? ", " : "") + JsonLine().add("line", plan.reasoning[i]).str();
  out += "], \"ranked\": [";
  for (size_t i = 0; i < plan.ranked.size(); ++i) out += (i ? ",\n  " : "\n  ") + row_json(plan.ranked[i]);
  return out + "]}\n";
}

}  // namespace trident
