#include "parallel/comm.h"

#include "core/error.h"
#include "parallel/comm_backends.h"
#include "parallel/launch.h"

namespace trident {
namespace {

class CompletedCollective : public PendingCollective {
 public:
  void wait() override {}
};

class SelfCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "self"; }
  void all_reduce(torch::Tensor&, ReduceOp) override {}
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp) override {
    require_chunks(in, out, 1, "reduce_scatter");
    out.copy_(in);
  }
  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    require_chunks(out, in, 1, "all_gather");
    out.copy_(in);
  }
  void broadcast(torch::Tensor&, int) override {}
  void send(const torch::Tensor&, int) override { fail("send: a group of one has no peer"); }
  void recv(torch::Tensor&, int) override { fail("recv: a group of one has no peer"); }
  void exchange(std::vector<Transfer>& transfers) override {
    if (!transfers.empty()) fail("exchange: a group of one has no peer");
  }
  void barrier() override {}
  std::shared_ptr<Communicator> split(int, int) override {
    return std::make_shared<SelfCommunicator>();
  }
};

[[maybe_unused]] [[noreturn]] void missing(const std::string& backend) {
  fail("parallel.backend=", backend, " is not built into this trident (it has: ",
       available_backends(), ")");
}

}  // namespace

std::unique_ptr<PendingCollective> Communicator::all_reduce_async(torch::Tensor& tensor,
                                                                  ReduceOp op) {
  all_reduce(tensor, op);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::reduce_scatter_async(torch::Tensor& out,
                                                                      const torch::Tensor& in,
                                                                      ReduceOp op) {
  reduce_scatter(out, in, op);
  return std::make_unique<CompletedCollective>();
}

void require_contiguous(const torch::Tensor& tensor, const char* operation) {
  if (!tensor.is_contiguous()) fail(operation, ": the tensor must be contiguous");
}

void require_chunks(const torch::Tensor& big, const torch::Tensor& small, int parts,
                    const char* operation) {
  require_contiguous(big, operation);
  require_contiguous(small, operation);
  if (big.numel() != parts * small.numel() || big.scalar_type() != small.scalar_type())
    fail(operation, ": expected ", parts, " x ", small.numel(), " elements of ",
         small.scalar_type(), ", got ", big.numel(), " of ", big.scalar_type());
}

std::shared_ptr<Communicator> make_self_communicator() {
  return std::make_shared<SelfCommunicator>();
}

std::string available_backends() {
  std::string out = "self";
#ifdef TRIDENT_WITH_MPI
  out += " mpi";
#endif
#ifdef TRIDENT_WITH_GLOO
  out += " gloo";
#endif
#ifdef TRIDENT_WITH_NCCL
  out += " nccl";
#endif
  return out;
}

std::shared_ptr<Communicator> make_world_communicator(const LaunchInfo& launch,
                                                      const CommOptions& options) {
  std::string backend = options.backend;
  if (backend == "auto") {
    if (launch.world_size == 1 && !options.device.is_cuda()) return make_self_communicator();
    backend = options.device.is_cuda() ? "nccl" : launch.launcher == "torchrun" ? "gloo" : "mpi";
  }
  const auto cpu_bootstrap = [&]() -> std::shared_ptr<Communicator> {
    if (launch.world_size == 1) return make_self_communicator();
#ifdef TRIDENT_WITH_GLOO
    if (launch.launcher == "torchrun") return make_gloo_world_communicator(launch, options.timeout);
#endif
#ifdef TRIDENT_WITH_MPI
    if (launch.launcher != "torchrun") return make_mpi_world_communicator();
#endif
    fail("no CPU backend of this build (", available_backends(), ") can start processes launched by ",
         launch.launcher);
  };
  if (backend == "mpi") {
#ifdef TRIDENT_WITH_MPI
    if (launch.launcher == "torchrun")
      fail("parallel.backend=mpi needs a launch by mpirun or srun, but this job was launched ",
           "with torchrun-style variables; use parallel.backend=gloo");
    return make_mpi_world_communicator();
#else
    missing(backend);
#endif
  }
  if (backend == "gloo") {
#ifdef TRIDENT_WITH_GLOO
    if (launch.launcher != "torchrun")
      fail("parallel.backend=gloo needs MASTER_ADDR/MASTER_PORT (a torchrun-style launch); this ",
           "job was launched by ", launch.launcher);
    return make_gloo_world_communicator(launch, options.timeout);
#else
    missing(backend);
#endif
  }
  if (backend == "nccl") {
#ifdef TRIDENT_WITH_NCCL
    auto bootstrap = cpu_bootstrap();
    return make_nccl_world_communicator(launch, *bootstrap);
#else
    (void)cpu_bootstrap;
    missing(backend);
#endif
  }
  fail("parallel.backend=", backend, " is unknown; expected auto, mpi, gloo or nccl");
}

}  // namespace trident
