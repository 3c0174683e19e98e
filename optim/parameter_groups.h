// Parameter groups: the parameters that the same ranks hold copies of, each group with its own
// optimizer (optim/zero.h) over those ranks, which is where its gradients are averaged and what
// ZeRO shards it over (Megatron-Core keeps expert gradients in buffers of their own, reduced
// over the expert-data-parallel group, in the same way). A parameter's role names its group:
//
//   group     holds                  copies on (the group's replicas)     gradients averaged as
//   dense     every other parameter  the data- and context-parallel ranks  over those ranks
//   experts   ParameterRole::expert  the expert-data-parallel ranks        over the data- and
//                                                                         context-parallel ranks
//
// An expert's gradient already sums the tokens of its expert-parallel group (the all-to-all
// brought them), so after the average over its replicas it is divided by ep as well: the
// average over data x context, as a dense weight's. Without experts there is one group, the
// run as it was before groups.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "core/config.h"
#include "core/layout.h"
#include "optim/zero.h"
#include "parallel/comm/process_groups.h"
#include "parallel/parameter_role.h"

namespace trident {

struct ParameterGroup {
  bool experts = false;              // the experts' group (ParameterRole::expert), else the dense one
  std::vector<size_t> members;       // indices into the model's parameters, in model order
  std::vector<RoledParameter> params;
  Communicator* replicas = nullptr;  // the ranks holding copies of them
  double grad_factor = 1.0;          // applied after the average over `replicas`
  std::unique_ptr<ZeroOptimizer> optimizer;
};

class ParameterGroups {
 public:
  // Takes over the model's parameters (model order) as ZeroOptimizer does, one optimizer per
  // group with members, dense first. `options.units` in model order, as the parameters.
  ParameterGroups(const std::vector<RoledParameter>& params, const ProcessGroups& groups, const Layout& layout,
                  const OptimizerConfig& config, const ZeroOptions& options);

  std::vector<ParameterGroup>& groups() { return groups_; }
  const std::vector<ParameterGroup>& groups() const { return groups_; }

  // Each group's DataParallelGrads, together.
  void zero_grads();
  void arm_grads();
  // Waits for every group's reductions and applies each group's grad_factor.
  void finish_grads();
  void scale_grads(const torch::Tensor& factor);
  void step(double lr);
  void publish();
  int64_t steps() const { return groups_.front().optimizer->steps(); }
  void restore_steps(int64_t steps);
  StateMemory memory() const;
  // ZeRO-3: every group's sharded weights, gathered together unit by unit (null at stages 0-2).
  std::shared_ptr<UnitWeights> sharded_weights() const;
  // Whether any group's ranks hold different parts of its optimizer state.
  bool sharded() const;

 private:
  std::vector<ParameterGroup> groups_;
};

}  // namespace trident
