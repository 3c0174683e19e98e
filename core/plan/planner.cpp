#include "core/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/json_line.h"
#include "core/plan/flops.h"
#include "core/text.h"

namespace trident {
namespace {

std::string describe(const Layout& l) {
  return str(describe_axes(l), ", micro-batch ", l.micro_batch,
             ", recompute ", l.recompute);
}

}  // namespace

std::optional<Layout> candidate(const Config& config, int64_t gpus, int64_t tp_size, int64_t cp_size,
                                int64_t pp_size, int64_t micro_batch, Recompute recompute, int64_t ep_size) {
  Config c = config;
  c.parallel.tensor = tp_size;
  c.parallel.context = cp_size;
  if (ep_size > 0) c.parallel.expert = ep_size;
  // Ulysses groups of at most the asked size that divide this CP (a CP of 1 has none).
  if (c.parallel.ulysses_size > 0) c.parallel.ulysses_size = std::gcd(c.parallel.ulysses_size, cp_size);
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
  row.memory = estimate_memory(m, vocab, layout, config.precision, hw.software);
  const double memory = hw.device.memory_gib * kGiB, estimate = row.memory.total();
  row.fits = estimate <= memory;
  row.near_edge = std::abs(estimate / memory - 1) <= kMemoryMargin;
  row.time = estimate_iteration_time(config, layout, hw.device, hw.software);
  // Offload: this rank's shard of fp32 gradients goes to the host and its 16-bit weights come
  // back once per iteration, and the CPU runs AdamW over the shard.
  if (layout.offload) {
    const double shard = row.memory.parameters / double(layout.zero().shards());
    row.offload_s = shard * (4.0 + 2.0) / (hw.device.host_link_gbs * 1e9) + shard / hw.host_adam_params_per_s;
  }
  const IterationFlops flops = iteration_flops(m, vocab, config.batch.global_batch_size, layout.recompute);
  const double gpu_seconds = row.seconds() * double(layout.world_size());
  row.tokens_per_s = double(config.batch.global_batch_size * m.seq_length) / row.seconds();
  row.tflops_per_gpu = flops.model / gpu_seconds / 1e12;
  row.hardware_tflops_per_gpu = flops.hardware / gpu_seconds / 1e12;
  return row;
}

Plan make_plan(const Config& config, const Hardware& hw) {
  const auto& m = config.model;
  const int64_t global = config.batch.global_batch_size;
  Plan plan;
  plan.hardware = as_run(hw, config);
  plan.parameters = double(gpt_parameter_count(m, m.padded_vocab()));
  // Pipeline depths up to one slot per stage.
  const int64_t slots = layer_slots(m.num_layers, config.parallel.embedding_and_loss_as_layers);

  auto shape = [&](int64_t tp, int64_t cp, int64_t pp, int64_t micro, Recompute recompute, int64_t ep = 0) {
    return candidate(config, hw.gpus, tp, cp, pp, micro, recompute, ep);
  };
  // Expert parallelism, for a model with experts: every power of two that divides the experts
  // (the layout rules keep those that divide data x context), and the config's own.
  std::vector<int64_t> expert_degrees = {config.parallel.expert};
  for (int64_t ep = 1; ep <= m.num_moe_experts; ep *= 2)
    if (m.num_moe_experts % ep == 0 && ep != config.parallel.expert) expert_degrees.push_back(ep);

  for (int64_t tp = 1; tp <= hw.device.gpus_per_node; tp *= 2)
    for (int64_t cp = 1; cp <= hw.gpus / tp; cp *= 2)
      for (int64_t pp = 1; pp <= slots; ++pp)
        for (int64_t micro = 1; micro <= global; micro *= 2)
          for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
            for (int64_t ep : expert_degrees)
              if (auto l = shape(tp, cp, pp, micro, recompute, ep)) {
                PlanRow row = evaluate_layout(config, *l, hw);
                if (!row.refused()) plan.ranked.push_back(row);
              }
  std::sort(plan.ranked.begin(), plan.ranked.end(),
            [](const PlanRow& a, const PlanRow& b) { return a.seconds() < b.seconds(); });

  // The rule of thumb, for the config's own micro-batch size and recompute.
  const double memory = hw.device.memory_gib * kGiB;
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
    why.push_back(str("parameters x 18 B = ", si_units(states), "B < 75% of ", hw.device.memory_gib,
                      " GiB: no model parallelism, data parallelism over all ", hw.gpus, " GPUs"));
    if (!take(1, 1, 1)) why.push_back("but TP 1 x PP 1 does not divide the batch or fit; searching");
  } else {
    why.push_back(str("parameters x 18 B = ", si_units(states), "B >= 75% of ", hw.device.memory_gib,
                      " GiB: model parallelism needed"));
  }
  if (!plan.recommended) {
    int64_t widest = 1;
    for (int64_t tp = 1; tp <= hw.device.gpus_per_node && !plan.recommended; tp *= 2) {
      if (shape(tp, 1, 1, micro, config.recompute)) widest = tp;
      if (take(tp, 1, 1)) why.push_back(str("TP ", tp, " is the smallest tensor parallelism that fits"));
    }
    if (m.seq_length >= kLongSequence)
      for (int64_t cp = 2; cp <= hw.gpus / widest && !plan.recommended; cp *= 2)
        if (take(widest, cp, 1))
          why.push_back(str("sequence ", m.seq_length, " >= ", kLongSequence, ": TP ", widest, " and CP ", cp,
                            ", the smallest context parallelism that fits"));
    for (int64_t pp = 2; pp <= slots && !plan.recommended; ++pp)
      if (take(widest, 1, pp))
        why.push_back(str("no TP within a node (<= ", hw.device.gpus_per_node, ") fits: TP ", widest,
                          " and PP ", pp, ", the smallest pipeline depth that fits"));
  }
  if (!plan.recommended) {
    why.push_back(str("no layout with micro-batch ", micro, " and recompute=", config.recompute, " fits in ",
                      hw.device.memory_gib, " GiB on ", hw.gpus, " GPUs"));
  } else {
    const Layout& l = plan.recommended->layout;
    why.push_back("recommended: " + describe(l));
    for (const auto& warning : efficiency_warnings(config, l, hw.device)) why.push_back("warning: " + warning);
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
                            "recompute=full", "model.hidden_dropout=0.1", "model.attention_dropout=0.1",
                            "data.type=synthetic"});
}

const std::vector<LlamaRun>& llama3_runs() {
  static const std::vector<LlamaRun> runs = {
      {"llama3-405b 8k", 8192, 1, 64, 8192, 430, "H100 matmul_tflops"},
      {"llama3-405b 8k", 16384, 1, 128, 8192, 400, ""},
      {"llama3-405b 128k", 16384, 16, 8, 131072, 380, "H100 attention_tflops"},
  };
  return runs;
}

Config llama3_run_config(const LlamaRun& run) {
  // 16M tokens per batch: global batch x sequence = 2^24.
  const int64_t global_batch = (int64_t(1) << 24) / run.seq_length;
  return Config::parse(
      "", {"model.num_layers=126", "model.hidden_size=16384", "model.num_attention_heads=128",
           "model.num_query_groups=8", "model.ffn_hidden_size=53248", "model.vocab_size=128256",
           str("model.seq_length=", run.seq_length), "model.normalization=rmsnorm", "model.position_embedding_type=rope",
           "model.activation=swiglu", "model.add_bias_linear=false", "model.untie_embeddings_and_output_weights=true",
           "model.hidden_dropout=0", "model.attention_dropout=0", "parallel.tensor=8",
           str("parallel.context=", run.context), "parallel.pipeline=16", "parallel.schedule=interleaved_1f1b",
           "parallel.virtual_stages=8", "parallel.embedding_and_loss_as_layers=true",
           "parallel.sequence_parallel=true", "parallel.zero_stage=1", "batch.micro_batch_size=1",
           str("batch.global_batch_size=", global_batch), "precision=bf16", "recompute=none", "data.type=synthetic"});
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

std::string describe_hardware(const Hardware& hw) {
  const DeviceProfile& d = hw.device;
  return str(hw.gpus, " x ", d.name, " (", hw.device.memory_gib, " GiB, ", d.peak_tflops,
             " TFLOP/s peak, multiplies at ", d.matmul_tflops, "), ", d.gpus_per_node, " per node, links ",
             d.intra_node_gbs, " GB/s within a node, ", d.inter_node_gbs, " between nodes per GPU, ", d.host_link_gbs,
             " to the host; software ", describe_software(hw.software));
}

Hardware as_run(Hardware hardware, const Config& config) {
  hardware.software = as_run(hardware.software, config.model, config.precision);
  return hardware;
}

std::string plan_table(const Plan& plan, size_t max_rows) {
  std::string out = str("# ", describe_hardware(plan.hardware), "\n# ", si_units(plan.parameters), " parameters\n");
  for (const auto& line : plan.reasoning) out += "# " + line + "\n";
  // A model with experts gets two columns more: expert parallelism and its all-to-alls.
  const bool experts =
      std::any_of(plan.ranked.begin(), plan.ranked.end(), [](const PlanRow& r) { return r.layout.ep_size > 1; });
  char line[256];
  std::snprintf(line, sizeof line, "%4s %4s %4s %5s %5s %4s %-9s %9s %9s %9s %8s %8s %8s %8s %8s", "TP", "CP", "PP",
                "DP", "micro", "M", "recompute", "mem(GiB)", "act(GiB)", "iter(s)", "bubble", "tp-comm", "cp-comm",
                "dp-comm", "pp-comm");
  out += line;
  if (experts) out += "   EP  ep-comm";
  out += " TFLOPS/GPU\n";
  auto row_line = [&](const PlanRow& r, const char* mark) {
    const auto& l = r.layout;
    std::snprintf(line, sizeof line, "%4lld %4lld %4lld %5lld %5lld %4lld %-9s %9.1f %9.1f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f",
                  (long long)l.tp_size, (long long)l.cp_size, (long long)l.pp_size, (long long)l.dp_size,
                  (long long)l.micro_batch, (long long)l.micro_batches, name(l.recompute),
                  r.memory.total() / kGiB, r.memory.activations / kGiB, r.seconds(), r.time.bubble_s,
                  r.time.tensor_comm_s, r.time.context_comm_s, r.time.data_comm_s, r.time.pipeline_comm_s);
    out += line;
    if (experts) {
      std::snprintf(line, sizeof line, " %4lld %8.2f", (long long)l.ep_size, r.time.expert_comm_s);
      out += line;
    }
    std::snprintf(line, sizeof line, " %9.1f%s%s\n", r.tflops_per_gpu, r.near_edge ? "  (memory near the edge)" : "", mark);
    out += line;
  };
  if (plan.recommended) row_line(*plan.recommended, "  <- rule of thumb");
  for (size_t i = 0; i < plan.ranked.size() && i < max_rows; ++i) row_line(plan.ranked[i], "");
  return out;
}

std::string describe_row(const PlanRow& r) {
  const auto& m = r.memory;
  const auto& t = r.time;
  char time[384];
  std::snprintf(time, sizeof time,
                "iteration time (estimate): %.3g s = compute %.3g + bubble %.3g + TP %.3g + CP %.3g + EP %.3g + "
                "DP %.3g + PP %.3g + optimizer %.3g + offload %.3g; %.3g TFLOPS per GPU (%.3g with recomputation)",
                r.seconds(), t.compute_s, t.bubble_s, t.tensor_comm_s, t.context_comm_s, t.expert_comm_s, t.data_comm_s,
                t.pipeline_comm_s, t.optimizer_s, r.offload_s, r.tflops_per_gpu, r.hardware_tflops_per_gpu);
  const std::string gathered = m.gathered > 0 ? str(" + ", binary_bytes(m.gathered), " gathered") : "";
  const std::string host = m.host > 0 ? str(", host ", binary_bytes(m.host)) : "";
  return str("memory per GPU (estimate): weights ", binary_bytes(m.weights), gathered, ", grads ",
             binary_bytes(m.grads), ", optimizer ", binary_bytes(m.optimizer), host, ", activations ",
             binary_bytes(m.activations), ", backward's working set ", binary_bytes(m.transient), ", allowance ", binary_bytes(m.allowance), ", total ",
             binary_bytes(m.total()), " (", si_units(m.parameters),
             " parameters on the busiest rank)\n", time);
}

std::string explain_layout(const Config& config, const Layout& layout, const Hardware& hw) {
  const PlanRow row = evaluate_layout(config, layout, hw);
  std::string out =
      str("# ", describe(layout), "\n# ", describe_hardware(as_run(hw, config)), "\n# time per iteration\n");
  for (const auto& line : row.time.explanation) out += line + "\n";
  if (layout.offload) out += str("offload    ", row.offload_s, " s  host copies and the CPU's AdamW\n");
  out += str("# ", fixed(row.tokens_per_s / double(layout.world_size()), 0), " tokens/s per GPU, ", row.tflops_per_gpu,
             " TFLOP/s per GPU by the model FLOPs (no recomputation), ", row.hardware_tflops_per_gpu,
             " counting recomputation (Megatron 2021's count)\n# memory per GPU\n");
  const MemoryEstimate& m = row.memory;
  const std::pair<const char*, double> parts[] = {{"weights", m.weights},     {"gathered", m.gathered},
                                                  {"grads", m.grads},         {"optimizer", m.optimizer},
                                                  {"activations", m.activations}, {"transient", m.transient},
                                                  {"allowance", m.allowance},
                                                  {"total", m.total()},       {"host", m.host}};
  for (const auto& [what, bytes] : parts) {
    char line[96];
    std::snprintf(line, sizeof line, "%-11s %10s\n", what, binary_bytes(bytes).c_str());
    out += line;
  }
  out += str("# ",
             row.near_edge ? str("near the edge (the estimate within ", int(100 * kMemoryMargin),
                                 "% of the memory: it may fit or not)")
             : row.fits    ? "fits"
                           : "does not fit",
             " in ", hw.device.memory_gib, " GiB\n");
  for (const auto& warning : efficiency_warnings(config, layout, hw.device)) out += "# warning: " + warning + "\n";
  return out;
}

std::string plan_json(const Plan& plan) {
  auto row_json = [](const PlanRow& r) {
    const auto& l = r.layout;
    JsonLine j;
    j.add("tensor", l.tp_size).add("context", l.cp_size).add("ulysses", l.ulysses_size).add("pipeline", l.pp_size)
        .add("data", l.dp_size).add("expert", l.ep_size)
        .add("micro_batch", l.micro_batch).add("micro_batches", l.micro_batches)
        .add("sequence_parallel", int64_t(l.sequence_parallel)).add("recompute", std::string(name(l.recompute)))
        .add("memory_bytes", r.memory.total()).add("weights_bytes", r.memory.weights)
        .add("gathered_bytes", r.memory.gathered).add("host_bytes", r.memory.host)
        .add("grads_bytes", r.memory.grads).add("optimizer_bytes", r.memory.optimizer)
        .add("activations_bytes", r.memory.activations).add("transient_bytes", r.memory.transient)
        .add("allowance_bytes", r.memory.allowance)
        .add("iteration_s", r.seconds()).add("compute_s", r.time.compute_s).add("bubble_s", r.time.bubble_s)
        .add("tensor_comm_s", r.time.tensor_comm_s).add("context_comm_s", r.time.context_comm_s)
        .add("expert_comm_s", r.time.expert_comm_s)
        .add("data_comm_s", r.time.data_comm_s).add("pipeline_comm_s", r.time.pipeline_comm_s)
        .add("optimizer_s", r.time.optimizer_s).add("offload_s", r.offload_s)
        .add("tflops_per_gpu", r.tflops_per_gpu).add("hardware_tflops_per_gpu", r.hardware_tflops_per_gpu);
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
