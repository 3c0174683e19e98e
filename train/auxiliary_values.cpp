#include "train/auxiliary_values.h"

#include "core/error.h"
#include "parallel/comm/process_groups.h"

namespace trident {

torch::Tensor auxiliary_values(std::vector<GPT>& chunks, const ProcessGroups& groups, int64_t micro_batches,
                               const torch::Device& device) {
  const int64_t names = int64_t(declared_auxiliary_losses().size());
  if (names == 0) return {};
  auto total = torch::zeros({names}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  if (groups.coordinates().tp == 0)
    for (auto& chunk : chunks)
      if (const torch::Tensor& values = chunk->auxiliary_losses().values(); values.defined()) total += values;
  groups.world().all_reduce(total, ReduceOp::sum);
  const int64_t replicas = groups.world().size() / groups.mp_group().size();
  return total / double(micro_batches * replicas);
}

std::vector<std::pair<std::string, double>> named_auxiliary_values(const torch::Tensor& values) {
  std::vector<std::pair<std::string, double>> out;
  if (!values.defined()) return out;
  const std::vector<std::string> names = declared_auxiliary_losses();
  const torch::Tensor host = values.cpu();
  TRIDENT_CHECK(host.numel() == int64_t(names.size()), host.numel(), " auxiliary values for ", names.size(), " names");
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], host[int64_t(i)].item<double>());
  return out;
}

}  // namespace trident
