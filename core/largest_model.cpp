#include "core/largest_model.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/flops.h"
#include "core/text.h"

namespace trident {
namespace {

constexpr double kGiB = double(1 << 30);

// The strategy's layout of `shape` on `gpus` GPUs at TP t and PP p, or nothing when it does not
// divide the model or the batch.
std::optional<std::pair<Config, Layout>> shaped(const Config& base, const StandardShape& shape, const Strategy& s,
                                                int64_t gpus, int64_t t, int64_t p) {
  Config c = base;
  c.model.num_layers = shape.layers;
  c.model.hidden_size = shape.hidden;
  c.model.num_attention_heads = shape.heads;
  c.parallel.tensor = t;
  c.parallel.pipeline = p;
  c.parallel.context = 1;
  c.parallel.data = 0;
  c.parallel.zero_stage = s.zero_stage;
  c.parallel.virtual_stages = 1;
  c.parallel.schedule = Schedule::one_f_one_b;
  c.parallel.sequence_parallel = t > 1;
  c.batch.micro_batch_size = 1;
  c.recompute = s.recompute;
  c.optimizer.offload = s.offload ? "cpu" : "none";
  if (!layout_problem(c, gpus).empty()) return std::nullopt;
  return std::pair{c, resolve_layout(c, gpus)};
}

// The fastest layout of the strategy that fits, if any.
std::optional<PlanRow> fastest_fit(const Config& base, const StandardShape& shape, const Strategy& s,
                                   const Hardware& hw) {
  std::optional<PlanRow> best;
  for (int64_t t = 1; t <= (s.tensor ? std::min(hw.gpus_per_node, hw.gpus) : 1); t *= 2)
    for (int64_t p = 1; p <= (s.pipeline ? std::min(shape.layers, hw.gpus / t) : 1); ++p)
      if (auto candidate = shaped(base, shape, s, hw.gpus, t, p)) {
        PlanRow row = evaluate_layout(candidate->first, candidate->second, hw);
        if (row.fits && (!best || row.seconds() < best->seconds())) best = row;
      }
  return best;
}

}  // namespace

const std::vector<StandardShape>& standard_shapes() {
  static const std::vector<StandardShape> shapes = [] {
    std::vector<StandardShape> all = {
        {"125m (GPT-3)", 12, 768, 12},     {"350m (GPT-3)", 24, 1024, 16},   {"760m (GPT-3)", 24, 1536, 16},
        {"1.3b (GPT-3)", 24, 2048, 16},    {"2.7b (GPT-3)", 32, 2560, 32},   {"6.7b (GPT-3)", 32, 4096, 32},
        {"13b (GPT-3)", 40, 5120, 40},     {"175b (GPT-3)", 96, 12288, 96},  {"1.7b (Megatron)", 24, 2304, 24},
        {"3.6b (Megatron)", 30, 3072, 32}, {"7.5b (Megatron)", 36, 4096, 32}, {"18b (Megatron)", 40, 6144, 48},
        {"39b (Megatron)", 48, 8192, 64},  {"76b (Megatron)", 60, 10240, 80}, {"145b (Megatron)", 80, 12288, 96},
        {"310b (Megatron)", 96, 16384, 128}, {"530b (Megatron)", 105, 20480, 128}, {"1t (Megatron)", 128, 25600, 160}};
    auto size = [](const StandardShape& s) {
      ModelConfig m;
      m.num_layers = s.layers;
      m.hidden_size = s.hidden;
      m.num_attention_heads = s.heads;
      return gpt_parameter_count(m, 51200);
    };
    std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return size(a) < size(b); });
    return all;
  }();
  return shapes;
}

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all = {
      {"DP", false, false, 0, Recompute::none, false},
      {"DP + ZeRO-1", false, false, 1, Recompute::none, false},
      {"DP + ZeRO-2", false, false, 2, Recompute::none, false},
      {"TP (within a node) + DP", true, false, 0, Recompute::none, false},
      {"TP + PP + DP", true, true, 0, Recompute::none, false},
      {"TP + PP + ZeRO-2", true, true, 2, Recompute::none, false},
      {"TP + PP + ZeRO-2 + full recompute", true, true, 2, Recompute::full, false},
      {"TP + PP + ZeRO-2 + full recompute + offload", true, true, 2, Recompute::full, true},
  };
  return all;
}

std::vector<LargestModel> largest_models(const Config& base, const Hardware& hw) {
  std::vector<LargestModel> out;
  const auto& shapes = standard_shapes();
  for (const Strategy& s : strategies()) {
    LargestModel largest{s, std::nullopt, 0, {}};
    for (auto shape = shapes.rbegin(); shape != shapes.rend() && !largest.shape; ++shape)
      if (auto row = fastest_fit(base, *shape, s, hw)) {
        largest.shape = *shape;
        largest.row = *row;
        ModelConfig m = base.model;
        m.num_layers = shape->layers;
        m.hidden_size = shape->hidden;
        m.num_attention_heads = shape->heads;
        largest.parameters = double(gpt_parameter_count(m, m.padded_vocab()));
      }
    out.push_back(largest);
  }
  return out;
}

std::string largest_table(const std::vector<LargestModel>& rows, const Hardware& hw, const Config& base) {
  std::string out = str("# the largest standard GPT each strategy fits on ", hw.gpus, " GPUs of ", hw.memory_gib,
                        " GiB (", hw.gpus_per_node, " per node), seq ", base.model.seq_length, ", vocabulary ",
                        base.model.vocab_size, ", ", base.precision, ", global batch ", base.batch.global_batch_size,
                        ", micro-batch 1\n");
  char line[512];
  std::snprintf(line, sizeof line, "%-44s %-17s %8s  %-34s %9s %9s %11s\n", "strategy", "largest", "params",
                "layout", "mem(GiB)", "host(GiB)", "TFLOPS/GPU");
  out += line;
  for (const auto& r : rows) {
    if (!r.shape) {
      std::snprintf(line, sizeof line, "%-44s %-17s\n", r.strategy.name, "nothing fits");
    } else {
      const Layout& l = r.row.layout;
      const std::string layout = str(describe_axes(l), l.recompute != Recompute::none ? ", recompute" : "");
      std::snprintf(line, sizeof line, "%-44s %-17s %8s  %-34s %9.1f %9.1f %11.1f\n", r.strategy.name, r.shape->name,
                    si_units(r.parameters).c_str(), layout.c_str(), r.row.memory.total() / kGiB,
                    r.row.memory.host / kGiB, r.row.tflops_per_gpu);
    }
    out += line;
  }
  return out + "# ZeRO-3 (parameters sharded) is not in trident yet: it would divide the weights by DP too.\n";
}

}  // namespace trident
