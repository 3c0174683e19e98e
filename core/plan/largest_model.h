// "What is the largest model I can train on my machine, and how?": for each parallelism
// strategy trident offers, the largest of the standard GPT shapes (GPT-3's and Megatron's scaling
// table's) whose estimate fits the GPUs' memory, with its fastest fitting layout.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/plan/planner.h"

namespace trident {

struct StandardShape {
  const char* name;  // "2.7b (GPT-3)"
  int64_t layers, hidden, heads;
};
// GPT-3's eight sizes (Brown et al. 2020, table 2.1; 13B's width rounded to 5120 so that its
// heads divide it) and Megatron's ten (Narayanan et al. 2021), smallest first.
const std::vector<StandardShape>& standard_shapes();
// `model` with the shape's layers, hidden size and heads.
ModelConfig with_shape(ModelConfig model, const StandardShape& shape);

// What a strategy may use: the largest TP and PP it searches (1: none), the ZeRO stage,
// recomputation and offload.
struct Strategy {
  const char* name;
  bool tensor = false, pipeline = false;
  int64_t zero_stage = 0;
  Recompute recompute = Recompute::none;
  bool offload = false;
};
const std::vector<Strategy>& strategies();

struct LargestModel {
  Strategy strategy;
  std::optional<StandardShape> shape;  // none: not even the smallest fits
  double parameters = 0;
  PlanRow row;  // its fastest fitting layout at micro-batch 1
};

// `base` gives the sequence, vocabulary, precision and global batch; the shapes replace its
// model's layers, hidden size and heads.
std::vector<LargestModel> largest_models(const Config& base, const Hardware& hardware);
std::string largest_table(const std::vector<LargestModel>& rows, const Hardware& hardware, const Config& base);

}  // namespace trident
