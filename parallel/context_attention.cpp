#include "parallel/context_attention.h"

#include "core/error.h"

namespace trident {

torch::Tensor context_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const ContextParallel& cp, const LocalAttention& attend, double dropout,
                                RandomStream* stream, const torch::Tensor& documents) {
  TRIDENT_CHECK(cp.ulysses->size() * cp.ring->size() == cp.size(), "context parallelism over ", cp.size(),
                " ranks as Ulysses over ", cp.ulysses->size(), " and a ring of ", cp.ring->size());
  const LocalAttention across_ring = [&](const torch::Tensor& q_held, const torch::Tensor& k_held,
                                         const torch::Tensor& v_held) {
    if (cp.ring->size() == 1) return attend(q_held, k_held, v_held);
    return ring_attention(q_held, k_held, v_held, ContextParallel{cp.ring}, dropout, stream, documents);
  };
  if (cp.ulysses->size() == 1) return across_ring(q, k, v);
  return ulysses_attention(q, k, v, ContextParallel{cp.ulysses}, across_ring);
}

}  // namespace trident
