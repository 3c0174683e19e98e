#include "train/expert_balance.h"

#include <algorithm>

#include "parallel/comm/process_groups.h"

namespace trident {

torch::Tensor expert_load_counts(std::vector<GPT>& chunks, const ProcessGroups& groups, const torch::Device& device) {
  if (chunks.empty() || !chunks.front()->expert_load()) return {};
  const ModelConfig& model = chunks.front()->config();
  auto total = torch::zeros({model.num_layers, model.num_moe_experts + 1},
                            torch::TensorOptions().dtype(torch::kDouble).device(device));
  if (groups.coordinates().tp == 0)
    for (auto& chunk : chunks)
      if (const torch::Tensor& counts = chunk->expert_load()->counts(); counts.defined()) total += counts;
  groups.world().all_reduce(total, ReduceOp::sum);
  return total;
}

std::vector<std::pair<std::string, double>> expert_balance_values(const torch::Tensor& counts, bool capacity) {
  if (!counts.defined()) return {};
  const torch::Tensor host = counts.cpu();
  const torch::Tensor taken = host.narrow(1, 0, host.size(1) - 1);
  const torch::Tensor routed = taken.sum(1);
  double imbalance = 1;
  for (int64_t layer = 0; layer < host.size(0); ++layer)
    if (routed[layer].item<double>() > 0)
      imbalance = std::max(imbalance, taken[layer].max().item<double>() / taken[layer].mean().item<double>());
  std::vector<std::pair<std::string, double>> values = {{"load_imbalance", imbalance}};
  if (capacity) values.emplace_back("dropped", host.select(1, host.size(1) - 1).sum().item<double>());
  return values;
}

}  // namespace trident
