#include "core/plan/largest_model.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/plan/flops.h"
#include "core/text.h"

namespace trident {
namespace {

// The fastest layout of the strategy that fits `shape`, if any: its ZeRO stage, recompute and
// offload, 1F1B, sequence parallelism with TP, micro-batch 1, over the TP and PP it may use.
std::optional<PlanRow> fastest_fit(const Config& base, const StandardShape& shape, const Strategy& s,
                                   const Hardware& hw) {
  Config config = base;
  config.model = with_shape(base.model, shape);
  config.parallel.zero_stage = s.zero_stage;
  config.parallel.virtual_stages = 1;
  config.parallel.schedule = Schedule::one_f_one_b;
  config.parallel.sequence_parallel = true;  // where TP > 1 (resolve_layout)
  config.optimizer.offload = s.offload ? Offload::cpu : Offload::none;
  std::optional<PlanRow> best;
  const int64_t slots = layer_slots(shape.layers, config.parallel.embedding_and_loss_as_layers);
  for (int64_t t = 1; t <= (s.tensor ? std::min(hw.device.gpus_per_node, hw.gpus) : 1); t *= 2)
    for (int64_t p = 1; p <= (s.pipeline ? std::min(slots, hw.gpus / t) : 1); ++p)
      if (auto layout = candidate(config, hw.gpus, t, 1, p, 1, s.recompute)) {
        PlanRow row = evaluate_layout(config, *layout, hw);
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
    auto size = [](const StandardShape& s) { return gpt_parameter_count(with_shape(ModelConfig{}, s), 51200); };
    std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return size(a) < size(b); });
    return all;
  }();
  return shapes;
}

ModelConfig with_shape(ModelConfig model, const StandardShape& shape) {
  model.num_layers = shape.layers;
  model.hidden_size = shape.hidden;
  model.num_attention_heads = shape.heads;
  return model;
}

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all = {
      {"DP", false, false, 0, Recompute::none, false},
      {"DP + ZeRO-1", false, false, 1, Recompute::none, false},
      {"DP + ZeRO-2", false, false, 2, Recompute::none, false},
      {"DP + ZeRO-3", false, false, 3, Recompute::none, false},
      {"DP + ZeRO-3 + full recompute", false, false, 3, Recompute::full, false},
      {"TP (within a node) + DP", true, false, 0, Recompute::none, false},
      {"TP + PP + DP", true, true, 0, Recompute::none, false},
      {"TP + PP + ZeRO-2", true, true, 2, Recompute::none, false},
      {"TP + PP + ZeRO-2 + full recompute", true, true, 2, Recompute::full, false},
      {"TP + PP + ZeRO-2 + full recompute + offload", true, true, 2, Recompute::full, true},
      {"TP + PP + ZeRO-3 + full recompute", true, true, 3, Recompute::full, false},
      {"TP + PP + ZeRO-3 + full recompute + offload", true, true, 3, Recompute::full, true},
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
        const ModelConfig m = with_shape(base.model, *shape);
        largest.parameters = double(gpt_parameter_count(m, m.padded_vocab()));
      }
    out.push_back(largest);
  }
  return out;
}

std::string largest_table(const std::vector<LargestModel>& rows, const Hardware& hw, const Config& base) {
  std::string out = str("# the largest standard GPT each strategy fits on ", describe_hardware(as_run(hw, base)),
                        "\n# seq ", base.model.seq_length, ", vocabulary ", base.model.vocab_size, ", ", base.precision,
                        ", global batch ", base.batch.global_batch_size, ", micro-batch 1\n");
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
  return out;
}

}  // namespace trident
