#include "parallel/parameter_role.h"

#include "core/error.h"

namespace trident {

torch::Tensor ParallelModule::register_parameter(const std::string& name, torch::Tensor tensor,
                                                 ParameterRole role) {
  roles_[name] = role;
  return torch::nn::Module::register_parameter(name, std::move(tensor));
}

int64_t counted_elements(const std::vector<RoledParameter>& params, int tp_rank, int64_t ep_size) {
  int64_t count = 0;
  for (const auto& param : params)
    if (param.role.counted_in_norm(tp_rank)) count += param.tensor.numel() * (param.role.expert ? ep_size : 1);
  return count;
}

std::vector<RoledParameter> parameters_with_roles(const torch::nn::Module& module) {
  std::map<std::string, ParameterRole> roles;
  auto collect = [&](const std::string& prefix, const torch::nn::Module& m) {
    if (const auto* layer = dynamic_cast<const ParallelModule*>(&m))
      for (const auto& [name, role] : layer->own_roles()) roles[prefix.empty() ? name : prefix + "." + name] = role;
  };
  collect("", module);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) collect(item.key(), *item.value());
  std::vector<RoledParameter> out;
  for (const auto& item : module.named_parameters()) {
    const auto role = roles.find(item.key());
    if (role == roles.end())
      fail("parameter '", item.key(), "' has no role, so nothing knows how tensor parallelism splits it, how it ",
           "starts or how its gradient is finished: make it with trident's parallel layers (ColumnParallelLinear, ",
           "RowParallelLinear, Norm; not torch::nn's), or register it in a trident::ParallelModule (a ",
           "TransformerBlock is one) with register_parameter(name, tensor, role), e.g. ParameterRole::whole() for ",
           "a tensor every tensor-parallel rank holds whole (.partial_over_tp_when(context.tp.sequence_parallel) ",
           "when it acts on tokens) or ParameterRole::split(dim) for one they split");
    out.push_back({item.key(), item.value(), role->second});
  }
  return out;
}

}  // namespace trident
