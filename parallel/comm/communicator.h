// Collective communication over a group of processes, one interface for every backend.
//
// Tensors are contiguous and laid out flat: reduce_scatter's input holds size() equal chunks,
// rank r keeping chunk r; all_gather's output receives size() chunks in rank order. Every call
// is collective over the group (all members call it, in the same order).
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"

namespace trident {

struct LaunchInfo;

enum class ReduceOp { sum, avg, max };

// A collective in flight; wait() completes it (results are in the tensors afterwards).
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // Where this communicator's tensors live: the CPU, or NCCL's GPU.
  virtual torch::Device device() const { return torch::kCPU; }
  // What the group is for, in error messages: "the data-parallel group" (ProcessGroups names
  // them; "world" and "split" by default).
  const std::string& name() const { return name_; }
  virtual void set_name(std::string name) { name_ = std::move(name); }

  virtual void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  // Starts an all-reduce that may overlap with computation. The default completes at once.
  virtual std::unique_ptr<PendingCollective> all_reduce_async(torch::Tensor& tensor, ReduceOp op);
  virtual void reduce_scatter(torch::Tensor& out, const torch::Tensor& in,
                              ReduceOp op = ReduceOp::sum) = 0;
  // Starts a reduce-scatter that may overlap with computation. The default completes at once.
  virtual std::unique_ptr<PendingCollective> reduce_scatter_async(torch::Tensor& out,
                                                                  const torch::Tensor& in,
                                                                  ReduceOp op);
  virtual void all_gather(torch::Tensor& out, const torch::Tensor& in) = 0;
  // Starts an all-gather that may overlap with computation (ZeRO-3's prefetch); `in` and `out`
  // stay untouched until wait(). The default completes at once.
  virtual std::unique_ptr<PendingCollective> all_gather_async(torch::Tensor& out, const torch::Tensor& in);
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  virtual void send(const torch::Tensor& tensor, int peer) = 0;
  virtual void recv(torch::Tensor& tensor, int peer) = 0;
  // Several point-to-point transfers started together and completed together, so that two
  // neighbours sending to each other cannot block one another (pipeline exchanges).
  struct Transfer {
    torch::Tensor tensor;
    int peer;
    bool send;
  };
  virtual void exchange(std::vector<Transfer>& transfers) = 0;
  // Starts such transfers so that they may overlap with computation (ring attention); the
  // tensors stay untouched until wait(). `operation`, a string literal of one word, names them in
  // errors and flight records ("exchange", or what is built on them: "all_to_all"). The default
  // completes them at once.
  virtual std::unique_ptr<PendingCollective> exchange_async(std::vector<Transfer> transfers, const char* operation);
  // Every rank sends a part of `in` to every rank and receives one from each into `out`, the
  // parts cut along the first dimension in rank order: part i of `in` goes to rank i, and rank
  // i's part for this rank lands as part i of `out`. With no splits, `in` and `out` hold size()
  // equal parts; else in_splits[i] rows go to rank i and out_splits[i] rows come from it, so every
  // rank's out_splits[i] must equal rank i's in_splits[this rank] (an all-to-all of the counts
  // first agrees on them). Rows past the first dimension, and the dtype, must match.
  // Built on exchange(), so every backend has it with exchange's watch and failure path (NCCL's
  // all-to-all is its grouped sends and receives too).
  virtual void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits = {},
                          const std::vector<int64_t>& in_splits = {});
  virtual void barrier() = 0;
  // Members with the same color form a new group, ranked by (key, rank). Collective.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

 protected:
  // "MPI all_gather on the data-parallel group", for errors and the watchdog.
  std::string describe_call(const char* operation) const;

 private:
  std::string name_ = "world";
};

// A group of one process: every collective is the identity (or a copy).
std::shared_ptr<Communicator> make_self_communicator();

struct CommOptions {
  Backend backend = Backend::automatic;
  std::chrono::seconds timeout{300};
  torch::Device device = torch::kCPU;
};

// parallel.backend, parallel.timeout_s and train.device of a config.
CommOptions comm_options(const Config& config);

// Throws Error unless `options` fit the launch, the device and this build: mpi needs mpirun or
// srun, gloo a torchrun-style launch, nccl (and auto on a GPU) a CUDA device; CPU tensors
// travel over mpi or gloo. Communicates with nobody, so it can run before connect_world.
void check_backend(const LaunchInfo& launch, const CommOptions& options);

// The CPU communicator of all processes of the job, for CPU training, for agreeing on
// failures (parallel/comm/failure.h) and as NCCL's bootstrap: the self communicator for one process,
// MPI under mpirun or srun, Gloo over a TCPStore at MASTER_ADDR:MASTER_PORT under torchrun-style
// variables (connected within options.timeout). Calls check_backend first.
std::shared_ptr<Communicator> connect_world(const LaunchInfo& launch, const CommOptions& options);

// The communicator training uses: `cpu_world` itself, or NCCL over it for a CUDA device.
std::shared_ptr<Communicator> device_world(std::shared_ptr<Communicator> cpu_world,
                                           const LaunchInfo& launch, const CommOptions& options);

// connect_world and device_world in one.
std::shared_ptr<Communicator> make_world_communicator(const LaunchInfo& launch,
                                                      const CommOptions& options);

// Which backends this build has, e.g. "mpi gloo".
std::string available_backends();
// Whether NCCL's operations run on streams of their own, ordered with LibTorch's current CUDA
// stream by events (the CUDA LibTorch build); false without NCCL.
bool nccl_uses_torch_streams();

}  // namespace trident
