// Internal to parallel/: the backend factories and checks that every backend shares.
#pragma once

#include "parallel/comm.h"

namespace trident {

#ifdef TRIDENT_WITH_MPI
std::shared_ptr<Communicator> make_mpi_world_communicator();
#endif
#ifdef TRIDENT_WITH_GLOO
std::shared_ptr<Communicator> make_gloo_world_communicator(const LaunchInfo& launch,
                                                           std::chrono::seconds timeout);
#endif
#ifdef TRIDENT_WITH_NCCL
// The NCCL unique id travels from rank 0 over `bootstrap` (MPI or Gloo on the CPU).
std::shared_ptr<Communicator> make_nccl_world_communicator(const LaunchInfo& launch,
                                                           Communicator& bootstrap);
#endif

// Throws Error unless `tensor` is contiguous (collectives work on flat memory).
void require_contiguous(const torch::Tensor& tensor, const char* operation);
// Throws Error unless big.numel() == parts * small.numel().
void require_chunks(const torch::Tensor& big, const torch::Tensor& small, int parts,
                    const char* operation);

inline bool is_16bit_float(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

// Runs `body` on an fp32 copy of a bf16/fp16 tensor and copies the result back (backends
// without 16-bit reductions); on other dtypes it runs `body` on the tensor itself.
template <typename Body>
void with_reducible_dtype(torch::Tensor& tensor, Body body) {
  if (is_16bit_float(tensor)) {
    torch::Tensor wide = tensor.to(torch::kFloat);
    body(wide);
    tensor.copy_(wide);
  } else {
    body(tensor);
  }
}

}  // namespace trident
