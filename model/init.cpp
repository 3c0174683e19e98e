#include "model/init.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"
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
      const double deviation = role.init == Init::residual ? residual_std : std;
      const int64_t dim = role.partition_dim;
      // This rank's TP part of `whole`, drawn whole from (seed, `name`).
      auto part_of = [&](const std::string& name, torch::Tensor local) {
        std::vector<int64_t> full(local.sizes().begin(), local.sizes().end());
        const int64_t split = dim - (role.expert ? 1 : 0);  // an expert's own dimensions
        if (!role.replicated()) full[size_t(split)] *= tp.size;
        torch::Tensor whole = init_normal(name, full, deviation, seed);
        local.copy_(role.replicated() ? whole : whole.narrow(split, tp.rank * local.size(split), local.size(split)));
      };
      if (!role.expert) {
        part_of(p.name, p.tensor);
      } else {
        // Each expert drawn on its own, from (seed, name[e]) for its global index e: a rank draws
        // only the experts it holds, never the whole [E, ...] tensor.
        for (int64_t j = 0; j < p.tensor.size(0); ++j)
          part_of(str(p.name, "[", ep.rank * p.tensor.size(0) + j, "]"), p.tensor[j]);
      }
    }
  }
}

}  // namespace trident
