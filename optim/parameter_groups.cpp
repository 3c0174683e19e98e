#include "optim/parameter_groups.h"

#include "core/error.h"

namespace trident {

ParameterGroups::ParameterGroups(const std::vector<RoledParameter>& params, const ProcessGroups& groups,
                                 const Layout& layout, const OptimizerConfig& config, const ZeroOptions& options) {
  ParameterGroup dense{false, {}, {}, &groups.dp_cp_group(), 1.0, nullptr};
  ParameterGroup experts{true, {}, {}, &groups.edp_group(), 1.0 / double(layout.ep_size), nullptr};
  for (size_t i = 0; i < params.size(); ++i) {
    ParameterGroup& group = params[i].role.expert ? experts : dense;
    group.members.push_back(i);
    group.params.push_back(params[i]);
  }
  TRIDENT_CHECK(!dense.members.empty(), "a model without parameters outside its experts");
  for (ParameterGroup* group : {&dense, &experts}) {
    if (group->members.empty()) continue;
    ZeroOptions own = options;
    own.units.clear();
    if (!options.units.empty())
      for (size_t i : group->members) own.units.push_back(options.units[i]);
    group->optimizer = std::make_unique<ZeroOptimizer>(group->params, *group->replicas, config, own);
    groups_.push_back(std::move(*group));
  }
}

void ParameterGroups::zero_grads() {
  for (auto& group : groups_) group.optimizer->grads().zero();
}

void ParameterGroups::arm_grads() {
  for (auto& group : groups_) group.optimizer->grads().arm();
}

void ParameterGroups::finish_grads() {
  for (auto& group : groups_) {
    group.optimizer->grads().finish();
    if (group.grad_factor != 1.0)
      group.optimizer->scale_grads(torch::tensor(group.grad_factor, torch::dtype(torch::kDouble)));
  }
}

void ParameterGroups::scale_grads(const torch::Tensor& factor) {
  for (auto& group : groups_) group.optimizer->scale_grads(factor);
}

void ParameterGroups::step(double lr) {
  for (auto& group : groups_) group.optimizer->step(lr);
}

void ParameterGroups::publish() {
  for (auto& group : groups_) group.optimizer->publish();
}

void ParameterGroups::restore_steps(int64_t steps) {
  for (auto& group : groups_) group.optimizer->restore_steps(steps);
}

StateMemory ParameterGroups::memory() const {
  StateMemory total;
  for (const auto& group : groups_) {
    const StateMemory m = group.optimizer->memory();
    total.weights += m.weights;
    total.grads += m.grads;
    total.optimizer += m.optimizer;
    total.host += m.host;
    total.gathered += m.gathered;
  }
  return total;
}

std::shared_ptr<UnitWeights> ParameterGroups::sharded_weights() const {
  std::vector<std::shared_ptr<ShardedParameters>> sharded;
  for (const auto& group : groups_)
    if (auto weights = group.optimizer->sharded_weights()) sharded.push_back(weights);
  if (sharded.empty()) return nullptr;
  if (sharded.size() == 1) return sharded.front();
  return std::make_shared<ShardedGroups>(std::move(sharded));
}

bool ParameterGroups::sharded() const {
  for (const auto& group : groups_)
    if (group.optimizer->sharded()) return true;
  return false;
}

}  // namespace trident
