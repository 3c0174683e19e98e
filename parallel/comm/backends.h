// Internal to parallel/: the backend factories and checks that every backend shares.
#pragma once

#include "parallel/comm/communicator.h"

namespace trident {

#ifdef TRIDENT_WITH_MPI
// Blocking MPI calls are watched (parallel/comm/watchdog.h): one that outlives `timeout` ends the job.
std::shared_ptr<Communicator> make_mpi_world_communicator(std::chrono::seconds timeout);
// Whether this process has initialised MPI (and not finalised it).
bool mpi_running();
// Ends every process of the job: MPI_Abort on the world, or under Open MPI's mpirun a failed exit.
[[noreturn]] void abort_mpi_job(int exit_code);
#endif
#ifdef TRIDENT_WITH_GLOO
std::shared_ptr<Communicator> make_gloo_world_communicator(const LaunchInfo& launch,
                                                           std::chrono::seconds timeout);
#endif
#ifdef TRIDENT_WITH_NCCL
// The NCCL unique id travels from rank 0 over `bootstrap` (MPI or Gloo on the CPU); every
// operation must complete within `timeout` (parallel/comm/async_watchdog.h).
std::shared_ptr<Communicator> make_nccl_world_communicator(const LaunchInfo& launch, Communicator& bootstrap,
                                                           std::chrono::seconds timeout);
#endif

// Throws Error unless `tensor` is contiguous (collectives work on flat memory).
void require_contiguous(const torch::Tensor& tensor, const char* operation);
// Throws Error unless big.numel() == parts * small.numel().
void require_chunks(const torch::Tensor& big, const torch::Tensor& small, int parts,
                    const char* operation);

inline bool is_16bit_float(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

// An all-reduce or reduce-scatter in flight for backends without 16-bit reductions: its result
// lands in `buffer()`, the target itself or, for bf16/fp16, an fp32 copy that lives as long as
// the request. wait() completes the transfer, averages for ReduceOp::avg and copies the result
// back.
class WidenedReduction : public PendingCollective {
 public:
  WidenedReduction(const torch::Tensor& target, ReduceOp op, int size)
      : target_(target), buffer_(is_16bit_float(target) ? target.to(torch::kFloat) : target),
        op_(op), size_(size) {}
  torch::Tensor& buffer() { return buffer_; }
  void wait() final {
    wait_for_transfer();
    if (op_ == ReduceOp::avg) buffer_.div_(size_);
    if (!buffer_.is_same(target_)) target_.copy_(buffer_);
  }

 protected:
  virtual void wait_for_transfer() = 0;

 private:
  torch::Tensor target_, buffer_;
  ReduceOp op_;
  int size_;
};

}  // namespace trident
