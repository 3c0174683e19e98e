// Layout planning: every valid (TP, CP, PP, DP, micro-batch, recompute) for a model on a cluster,
// its memory per GPU and an explained time estimate, plus the rule-of-thumb choice.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "core/plan/device_profile.h"
#include "core/plan/memory.h"
#include "core/plan/software.h"
#include "core/plan/time_model.h"

namespace trident {

constexpr double kGiB = double(1 << 30);

struct Hardware {
  int64_t gpus = 8;
  // What each GPU holds and achieves, and the links around it (core/plan/device_profile.h).
  DeviceProfile device = a100_profile();
  Software software = trident_software();  // core/plan/time_model.h
  double host_adam_params_per_s = 1e9;  // AdamW on the CPU for one GPU's shard (stated, not measured)
};

struct PlanRow {
  Layout layout;
  MemoryEstimate memory;
  // Iteration time, term by term (core/plan/time_model.h), and offload_s: the host copies and the
  // CPU's AdamW with optimizer.offload=cpu.
  IterationTime time;
  double offload_s = 0;
  double seconds() const { return time.seconds() + offload_s; }
  double tokens_per_s = 0;             // the job's: global batch x sequence / time
  double tflops_per_gpu = 0;           // model FLOPs (no recompute) / time / GPUs
  double hardware_tflops_per_gpu = 0;  // FLOPs computed, recomputation included (Megatron 2021's count)
  // The estimate is checked against measured peaks (plan --validate): a row whose estimate is
  // within kMemoryMargin of the GPU's memory, over or under, is near the edge (it may fit or not:
  // try it); the rule of thumb takes rows that fit, the ranking those near the edge too, marked.
  bool fits = false;  // the estimate is within the GPU's memory
  bool near_edge = false;
  bool refused() const { return !fits && !near_edge; }
};
constexpr double kMemoryMargin = 0.1;

struct Plan {
  Hardware hardware;
  double parameters = 0;
  std::vector<PlanRow> ranked;          // every valid layout that fits or is near the edge, fastest first
  std::optional<PlanRow> recommended;   // the rule of thumb's choice for the config's batch
  std::vector<std::string> reasoning;   // how the rule of thumb decided, and warnings
};

// `config` with its layout choices replaced, as resolve_layout builds it on `gpus` ranks (the
// ZeRO stage, schedule, virtual stages and sequence parallelism stay the config's; expert
// parallelism too when `ep_size` is 0), or nothing when that layout does not fit the model or
// the batch.
std::optional<Layout> candidate(const Config& config, int64_t gpus, int64_t tp_size, int64_t cp_size,
                                int64_t pp_size, int64_t micro_batch, Recompute recompute, int64_t ep_size = 0);

// Estimates one layout (the config's model, global batch and precision).
PlanRow evaluate_layout(const Config& config, const Layout& layout, const Hardware& hardware);

// The rule of thumb (Narayanan et al. 2021, section 3): data parallelism as far as
// possible; no model parallelism when parameters x 18 bytes < 75% of GPU memory; else the
// smallest TP (within a node), then for long sequences (>= kLongSequence tokens) the smallest
// context parallelism beside it, then the smallest PP whose estimate fits; warn when
// global / micro batch is close to DP (few micro-batches: a large pipeline bubble).
// Uses the config's micro-batch size, recompute and expert parallelism; ranks every layout
// besides (for a model with experts, at every expert-parallel degree that divides the experts
// and the data x context ranks).
Plan make_plan(const Config& config, const Hardware& hardware);
// Where the rule of thumb turns to context parallelism before pipelining: activations grow
// with s (and the attention scores with s^2), which only CP divides.
constexpr int64_t kLongSequence = 8192;

// "8192 x H100 80GB SXM (80 GiB, 989 TFLOP/s peak, multiplies at 640), 8 per node, links 450 GB/s
// within a node, 50 between nodes per GPU, 50 to the host; software ...": what a plan assumes.
std::string describe_hardware(const Hardware& hardware);
// `hardware` with its software as a run of `config` uses it (core/plan/software.h's as_run), as
// the estimates take it and the plans print it.
Hardware as_run(Hardware hardware, const Config& config);

// Rows of the scaling table of Narayanan et al. 2021 (A100 80 GB, seq 2048, vocabulary 51200).
struct ScalingRow {
  const char* name;  // "1.7b" ... "1t", as in configs/gpt<name>.yaml
  double billions;
  int64_t heads, hidden, layers, tensor, pipeline, gpus, micro_batch, global_batch;
  double tflops_per_gpu;
};
const std::vector<ScalingRow>& megatron_scaling_table();
// The config of a row (bf16, full recompute, dropout 0.1, its TP and PP), as configs/ holds it.
Config scaling_row_config(const ScalingRow& row);

// Llama 3 405B's pre-training on H100s (Dubey et al. 2024, Table 4): TP 8 x PP 16 with 8
// interleaved chunks per stage whose first and last hold the embedding and the loss in a layer's
// place (126 layers in 128 slots), micro-batch 1, no recomputation, 16M tokens per batch.
struct LlamaRun {
  const char* name;
  int64_t gpus, context, data, seq_length;  // data: the published DP, which the layout must reach
  double tflops_per_gpu;
  const char* sets;  // the H100 profile constant set from this run, "" for a prediction
};
const std::vector<LlamaRun>& llama3_runs();
Config llama3_run_config(const LlamaRun& run);

// How the plan's recommendation relates to the row's published layout, in one sentence.
std::string compare_with_row(const Plan& plan, const ScalingRow& row, const Config& config);

std::string plan_table(const Plan& plan, size_t max_rows);
// Memory, time and TFLOPS of one row, several lines, for `train --dry-run` and logs.
std::string describe_row(const PlanRow& row);
std::string plan_json(const Plan& plan);
// plan --explain: one layout's time and memory, term by term, and the efficiency warnings.
std::string explain_layout(const Config& config, const Layout& layout, const Hardware& hardware);

}  // namespace trident
