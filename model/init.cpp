#include "model/init.h"

#include <ATen/CPUGeneratorImpl.h>

#include "parallel/parameter_role.h"

namespace trident {
namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001B3ull;
  return hash;
}

}  // namespace

torch::Tensor init_normal(const std::string& name, torch::IntArrayRef full_shape, double std,
                          uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed ^ fnv1a(name));
  return at::normal(0.0, std, full_shape, generator, torch::TensorOptions().dtype(torch::kDouble));
}

void initialize_parameters(torch::nn::Module& module, uint64_t seed, double std, double residual_std,
                           TensorParallelPlace tp, ExpertParallelPlace ep) {
  torch::NoGradGuard no_grad;
  for (auto& p : parameters_with_roles(module)) {
    const ParameterRole& role = p.role;
    if (role.init == Init::zeros) {
      p.tensor.zero_();
    } else if (role.init == Init::ones) {
      p.tensor.fill_(1.0);
    } else {
      std::vector<int64_t> full(p.tensor.sizes().begin(), p.tensor.sizes().end());
      if (!role.replicated()) full[size_t(role.partition_dim)] *= tp.size;
      if (role.expert) full[0] *= ep.size;
      torch::Tensor part = init_normal(p.name, full, role.init == Init::residual ? residual_std : std, seed);
      if (role.expert) part = part.narrow(0, ep.rank * p.tensor.size(0), p.tensor.size(0));
      const int64_t dim = role.partition_dim;
      if (!role.replicated()) part = part.narrow(dim, tp.rank * p.tensor.size(dim), p.tensor.size(dim));
      p.tensor.copy_(part);
    }
  }
}

}  // namespace trident
