#include "model/init.h"

#include <ATen/CPUGeneratorImpl.h>

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

}  // namespace trident
