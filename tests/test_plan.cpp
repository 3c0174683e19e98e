#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/flops.h"
#include "core/largest_model.h"
#include "core/memory.h"
#include "core/plan.h"

using namespace trident;

namespace {

const std::string kSource = TRIDENT_SOURCE_DIR;
// The shape of Korthikanti et al.'s worked example: s 2048, h 4096, a 32.
ModelConfig korthikanti_model() {
  ModelConfig m;
  m.seq_length = 2048;
  m.hidden_size = 4096;
  m.num_attention_heads = 32;
  return m;
}

}  // namespace

TEST(Memory, StateBytesPerParameter) {
  const StateBytes mixed = state_bytes(Precision::bf16);
  EXPECT_EQ(mixed.weights + mixed.grads + mixed.optimizer, 18);  // 2 + 4 + 12
  const StateBytes fp32 = state_bytes(Precision::fp32);
  EXPECT_EQ(fp32.weights + fp32.grads + fp32.optimizer, 16);     // 4 + 4 + 8
  EXPECT_EQ(state_bytes(Precision::bf16, "adam8bit").optimizer, 6);       // 4 + 1 + 1
  EXPECT_EQ(state_bytes(Precision::bf16, "sgd").optimizer, 8);            // 4 + 4
}

TEST(Memory, KorthikantiActivationsByHand) {
  const ModelConfig m = korthikanti_model();
  Layout l;
  l.micro_batch = 1;
  const double sbh = 2048.0 * 4096;
  const double scores = 5.0 * 32 * 2048 / 4096;  // 5as/h = 80
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), sbh * (34 + scores));
  l.tp_size = 8;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), sbh * (10 + 24.0 / 8 + scores / 8));
  l.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), sbh * (34 + scores) / 8);
  l.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), sbh * 34 / 8);
  l.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), 2 * sbh / 8);
}

// Context parallelism: s/c tokens per rank, and ring attention keeps no s x s scores.
TEST(Memory, ContextParallelDividesTheTokensAndDropsTheScores) {
  const ModelConfig m = korthikanti_model();
  Layout l;
  l.micro_batch = 1;
  l.cp_size = 4;
  const double sbh = 2048.0 / 4 * 4096;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), sbh * 34);
  l.tp_size = 8;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), sbh * (10 + 24.0 / 8));
  l.sequence_parallel = true;
  l.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l), 2 * sbh / 8);
  // ZeRO shards over data x context parallel ranks.
  Layout zero;
  zero.dp_size = 2;
  zero.zero_stage = 1;
  const double by_dp = estimate_memory(m, 256, zero, Precision::bf16).optimizer;
  zero.cp_size = 2;
  EXPECT_DOUBLE_EQ(estimate_memory(m, 256, zero, Precision::bf16).optimizer, by_dp / 2);
}

TEST(Memory, ZeroDividesTheStatesByDataParallelSize) {
  ModelConfig m;
  Layout l;
  l.dp_size = 4;
  const MemoryEstimate plain = estimate_memory(m, 256, l, Precision::bf16);
  l.zero_stage = 1;
  const MemoryEstimate one = estimate_memory(m, 256, l, Precision::bf16);
  l.zero_stage = 2;
  const MemoryEstimate two = estimate_memory(m, 256, l, Precision::bf16);
  EXPECT_DOUBLE_EQ(one.optimizer, plain.optimizer / 4);
  EXPECT_DOUBLE_EQ(one.grads, plain.grads * (1 + 1.0 / 4));  // the buffer and its reduced slice
  EXPECT_DOUBLE_EQ(two.grads, plain.grads / 4);
  EXPECT_DOUBLE_EQ(plain.weights + plain.grads + plain.optimizer, 18 * plain.parameters);
  // ZeRO-3: every state 1/d, plus the gathered working set: all but the blocks beyond two.
  l.zero_stage = 3;
  const MemoryEstimate three = estimate_memory(m, 256, l, Precision::bf16);
  EXPECT_DOUBLE_EQ(three.weights + three.grads + three.optimizer, 18 * plain.parameters / 4);
  EXPECT_DOUBLE_EQ(three.gathered,
                   2 * (plain.parameters - double((m.num_layers - 2) * gpt_layer_parameter_count(m))));
  EXPECT_EQ(two.gathered, 0);
  // 1F1B keeps at most p micro-batches in flight on the first stage, GPipe all M.
  m.num_layers = 8;
  l = Layout{};
  l.pp_size = 4;
  l.micro_batches = 16;
  const double one_f_one_b = estimate_memory(m, 256, l, Precision::bf16).activations;
  l.schedule = Schedule::gpipe;
  EXPECT_DOUBLE_EQ(estimate_memory(m, 256, l, Precision::bf16).activations, one_f_one_b * 4);
}

// For every row of Megatron's scaling table, from its config in configs/: the parameter count
// within 3% of the row's size, the row's own layout fits in 80 GB, and the rule of thumb picks
// the row's TP and PP or says precisely why not.
TEST(Plan, ReproducesTheMegatronScalingTable) {
  for (const ScalingRow& row : megatron_scaling_table()) {
    SCOPED_TRACE(row.name);
    const Config config = Config::load(kSource + "/configs/gpt" + row.name + ".yaml");
    EXPECT_EQ(config.parallel.tensor, row.tensor);
    EXPECT_EQ(config.parallel.pipeline, row.pipeline);
    const double parameters = double(gpt_parameter_count(config.model, config.model.padded_vocab()));
    EXPECT_NEAR(parameters / 1e9, row.billions, 0.03 * row.billions);

    Hardware a100;
    a100.gpus = row.gpus;
    const int64_t data = row.gpus / (row.tensor * row.pipeline);
    const PlanRow published = evaluate_layout(config, resolve_layout(config, row.gpus), a100);
    EXPECT_TRUE(published.fits) << published.memory.total() / kGiB << " GiB";
    EXPECT_EQ(published.layout.micro_batches, row.global_batch / (row.micro_batch * data));
    const Plan plan = make_plan(config, a100);
    ASSERT_TRUE(plan.recommended.has_value());
    const std::string comparison = compare_with_row(plan, row, config);
    EXPECT_EQ(comparison.find("does not fit"), std::string::npos) << comparison;
    const auto& ours = plan.recommended->layout;
    if (ours.tp_size != row.tensor || ours.pp_size != row.pipeline) {
      // Allowed only as a smaller layout that fits, the table's own fitting as well.
      EXPECT_LE(ours.tp_size * ours.pp_size, row.tensor * row.pipeline);
      EXPECT_NE(comparison.find("fits too; the rule of thumb stops at the smallest layout"),
                std::string::npos) << comparison;
    }
    EXPECT_LE(plan.recommended->memory.total(), 80 * kGiB);
    std::printf("%-5s %s\n", row.name, comparison.c_str());
  }
}

// The planner's layouts are built like the config's own (resolve_layout): a ranked row and
// `train --dry-run`'s estimate of the same layout agree, ZeRO stage, schedule and virtual stages
// included (a planner that dropped them estimated 34 GiB beside dry-run's 18 GiB).
TEST(Plan, RowsKeepTheConfigsZeroStageAndSchedule) {
  const Config config = Config::load(kSource + "/configs/gpt1.7b.yaml",
                                     {"parallel.zero_stage=1", "parallel.pipeline=2",
                                      "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"});
  Hardware a100;
  a100.gpus = 32;
  const Layout own = resolve_layout(config, a100.gpus);
  const PlanRow dry_run = evaluate_layout(config, own, a100);
  const Plan plan = make_plan(config, a100);
  int matches = 0;
  for (const PlanRow& row : plan.ranked) {
    const Layout& l = row.layout;
    EXPECT_EQ(l.zero_stage, 1);
    EXPECT_EQ(l.schedule, Schedule::interleaved_1f1b);
    EXPECT_EQ(l.virtual_stages, 2);
    if (l.tp_size == own.tp_size && l.cp_size == own.cp_size && l.pp_size == own.pp_size &&
        l.micro_batch == own.micro_batch && l.recompute == own.recompute) {
      ++matches;
      EXPECT_EQ(row.memory.total(), dry_run.memory.total());
      EXPECT_EQ(row.seconds(), dry_run.seconds());
    }
  }
  EXPECT_EQ(matches, 1);
}

// Data-parallel traffic per iteration: one all-reduce of the fp32 gradients at ZeRO 0 and 1,
// a reduce-scatter (half an all-reduce) per micro-batch at ZeRO 2, and at ZeRO 3 the 16-bit
// weights all-gathered for every micro-batch's forward and backward on top.
TEST(Plan, ZeroTrafficPerMicroBatch) {
  Hardware a100;
  a100.gpus = 32;
  auto data_comm = [&](int stage) {
    const Config config = Config::load(kSource + "/configs/gpt1.7b.yaml",
                                       {"batch.micro_batch_size=4", "parallel.zero_stage=" + std::to_string(stage)});
    const Layout layout = resolve_layout(config, a100.gpus);
    return std::pair{evaluate_layout(config, layout, a100), layout};
  };
  const auto [zero1, layout] = data_comm(1);
  const auto [zero2, unused2] = data_comm(2);
  const auto [zero3, unused3] = data_comm(3);
  const double m = double(layout.micro_batches), d = double(layout.dp_size), p = zero1.memory.parameters;
  ASSERT_GT(m, 1);
  const double half_all_reduce_s = (d - 1) / d / (a100.inter_node_gbs * 1e9);  // per byte
  EXPECT_DOUBLE_EQ(zero1.data_comm_s, 2 * half_all_reduce_s * 4 * p);
  EXPECT_DOUBLE_EQ(zero2.data_comm_s, m * half_all_reduce_s * 4 * p);
  EXPECT_DOUBLE_EQ(zero3.data_comm_s, zero2.data_comm_s + 2 * m * half_all_reduce_s * 2 * p);
}

TEST(Plan, RanksOnlyLayoutsThatFitFastestFirst) {
  const Config config = Config::load(kSource + "/configs/gpt3.6b.yaml");
  Hardware a100;
  a100.gpus = 64;
  const Plan plan = make_plan(config, a100);
  ASSERT_GT(plan.ranked.size(), 10u);
  for (size_t i = 0; i < plan.ranked.size(); ++i) {
    EXPECT_TRUE(plan.ranked[i].fits);
    EXPECT_LE(plan.ranked[i].memory.total(), 80 * kGiB);
    if (i) EXPECT_LE(plan.ranked[i - 1].seconds(), plan.ranked[i].seconds());
  }
  const std::string json = plan_json(plan);
  EXPECT_EQ(json.rfind("{\"parameters\": ", 0), 0u);
  EXPECT_NE(json.find("\"tflops_per_gpu\""), std::string::npos);
}

// Long sequences: the rule of thumb turns to context parallelism before pipelining, the ranked
// layouts include CP, and ring traffic is hidden by block attention at long local sequences but
// not at short ones between nodes.
TEST(Plan, LongSequencesUseContextParallelism) {
  Config config = Config::load(kSource + "/configs/gpt1.7b.yaml",
                               {"model.seq_length=131072", "batch.global_batch_size=64",
                                "batch.micro_batch_size=1", "recompute=selective"});
  Hardware a100;
  a100.gpus = 64;
  const Plan plan = make_plan(config, a100);
  ASSERT_TRUE(plan.recommended);
  EXPECT_GT(plan.recommended->layout.cp_size, 1);
  EXPECT_EQ(plan.recommended->layout.pp_size, 1);
  bool said = false;
  for (const auto& line : plan.reasoning) said |= line.find("the smallest context parallelism that fits") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_TRUE(std::any_of(plan.ranked.begin(), plan.ranked.end(), [](const PlanRow& r) { return r.layout.cp_size > 1; }));
  EXPECT_NE(plan_table(plan, 3).find("cp-comm"), std::string::npos);

  Layout l = resolve_layout(config, 64);
  l.cp_size = 16;
  l.dp_size = 4;
  EXPECT_EQ(evaluate_layout(config, l, a100).context_comm_s, 0);  // 8192 tokens a rank: hidden
  config.model.seq_length = 4096;
  l.cp_size = 16;  // 256 tokens a rank, across nodes: exposed
  EXPECT_GT(evaluate_layout(config, l, a100).context_comm_s, 0);
}

// plan --largest: every strategy's largest model fits, with the strategy's ZeRO stage;
// strategies that add memory savings never fit less; only offload uses host memory.
TEST(Plan, LargestModelPerStrategy) {
  const Config base = Config::parse("", {"model.seq_length=2048", "model.vocab_size=51200", "precision=bf16",
                                         "batch.global_batch_size=512", "data.type=synthetic"});
  for (const auto& [gpus, memory] : {std::pair{2, 24.0}, std::pair{8, 80.0}}) {
    SCOPED_TRACE(gpus);
    Hardware hw;
    hw.gpus = gpus;
    hw.memory_gib = memory;
    const auto rows = largest_models(base, hw);
    ASSERT_EQ(rows.size(), strategies().size());
    std::map<std::string, double> params;
    for (const auto& r : rows) {
      ASSERT_TRUE(r.shape) << r.strategy.name;
      EXPECT_TRUE(r.row.fits) << r.strategy.name;
      EXPECT_LE(r.row.memory.total(), memory * kGiB) << r.strategy.name;
      EXPECT_EQ(r.row.memory.host > 0, r.strategy.offload) << r.strategy.name;
      EXPECT_EQ(r.row.layout.zero_stage, r.strategy.zero_stage) << r.strategy.name;
      params[r.strategy.name] = r.parameters;
    }
    EXPECT_LE(params["DP"], params["DP + ZeRO-1"]);
    EXPECT_LE(params["DP + ZeRO-1"], params["DP + ZeRO-2"]);
    EXPECT_LE(params["DP + ZeRO-2"], params["DP + ZeRO-3"]);
    EXPECT_LE(params["DP + ZeRO-3"], params["DP + ZeRO-3 + full recompute"]);
    EXPECT_LT(params["TP + PP + ZeRO-3 + full recompute"], params["TP + PP + ZeRO-3 + full recompute + offload"]);
    EXPECT_LE(params["TP (within a node) + DP"], params["TP + PP + DP"]);
    EXPECT_LE(params["TP + PP + DP"], params["TP + PP + ZeRO-2"]);
    EXPECT_LE(params["TP + PP + ZeRO-2"], params["TP + PP + ZeRO-2 + full recompute"]);
    EXPECT_LT(params["TP + PP + ZeRO-2 + full recompute"], params["TP + PP + ZeRO-2 + full recompute + offload"]);
  }
  // Eight 80 GiB GPUs: sharding the weights too (12.9 G) beats sharding gradients (7.47 G).
  Hardware eight;
  eight.gpus = 8;
  const auto rows = largest_models(base, eight);
  auto largest = [&](const std::string& name) {
    for (const auto& r : rows)
      if (r.strategy.name == name) return r.parameters;
    return 0.0;
  };
  EXPECT_GT(largest("DP + ZeRO-3"), largest("DP + ZeRO-2"));
  const auto& shapes = standard_shapes();
  for (size_t i = 1; i < shapes.size(); ++i) {
    EXPECT_LE(gpt_parameter_count(with_shape(ModelConfig{}, shapes[i - 1]), 51200),
              gpt_parameter_count(with_shape(ModelConfig{}, shapes[i]), 51200))
        << shapes[i].name;
    EXPECT_EQ(shapes[i].hidden % shapes[i].heads, 0) << shapes[i].name;
  }
  EXPECT_NE(largest_table(largest_models(base, Hardware{}), Hardware{}, base).find("ZeRO-3"), std::string::npos);
}
