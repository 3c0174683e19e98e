#include "parallel/comm/communicator.h"

#include <algorithm>

#include "core/config.h"
#include "core/error.h"
#include "core/text.h"
#include "parallel/comm/backends.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/recorded_communicator.h"

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

}  // namespace

std::unique_ptr<PendingCollective> Communicator::all_reduce_async(torch::Tensor& tensor,
                                                                  ReduceOp op) {
  all_reduce(tensor, op);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::all_gather_async(torch::Tensor& out, const torch::Tensor& in) {
  all_gather(out, in);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::exchange_async(std::vector<Transfer> transfers, const char*) {
  exchange(transfers);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::reduce_scatter_async(torch::Tensor& out,
                                                                      const torch::Tensor& in,
                                                                      ReduceOp op) {
  reduce_scatter(out, in, op);
  return std::make_unique<CompletedCollective>();
}

namespace {
// The first row of each rank's part of an all-to-all's `tensor` (and, last, its number of rows):
// `splits`, or `size` equal parts when there are none.
//
//   rows:    0 .. 2 | 3 | 4 .. 8        splits {3, 1, 5}
//   offsets: 0        3   4        9
std::vector<int64_t> part_offsets(const torch::Tensor& tensor, const std::vector<int64_t>& splits, int size,
                                  const char* which) {
  const int64_t rows = tensor.size(0);
  std::vector<int64_t> offsets(size_t(size) + 1, 0);
  if (splits.empty()) {
    if (rows % size != 0)
      fail("all_to_all: ", which, "'s ", rows, " rows do not cut into ", size, " equal parts; give its splits");
    for (int r = 0; r < size; ++r) offsets[size_t(r) + 1] = offsets[size_t(r)] + rows / size;
    return offsets;
  }
  if (int64_t(splits.size()) != size)
    fail("all_to_all: ", splits.size(), " splits of ", which, " for a group of ", size, " ranks");
  for (int r = 0; r < size; ++r) {
    if (splits[size_t(r)] < 0) fail("all_to_all: ", which, "'s split for rank ", r, " is negative (", splits[size_t(r)], ")");
    offsets[size_t(r) + 1] = offsets[size_t(r)] + splits[size_t(r)];
  }
  if (offsets.back() != rows)
    fail("all_to_all: ", which, "'s splits add up to ", offsets.back(), " rows, but it has ", rows);
  return offsets;
}
}  // namespace

void Communicator::all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits) {
  require_contiguous(in, "all_to_all");
  require_contiguous(out, "all_to_all");
  if (in.dim() == 0 || in.dim() != out.dim() || in.sizes().slice(1) != out.sizes().slice(1) ||
      in.scalar_type() != out.scalar_type())
    fail("all_to_all: the input (", in.scalar_type(), " ", in.sizes(), ") and output (", out.scalar_type(), " ",
         out.sizes(), ") must both be rows along a first dimension, of the same shape and dtype");
  const std::vector<int64_t> sent = part_offsets(in, in_splits, size(), "the input");
  const std::vector<int64_t> received = part_offsets(out, out_splits, size(), "the output");
  auto part = [](const torch::Tensor& t, const std::vector<int64_t>& offsets, int r) {
    return t.narrow(0, offsets[size_t(r)], offsets[size_t(r) + 1] - offsets[size_t(r)]);
  };
  const int me = rank();
  torch::Tensor mine = part(out, received, me);
  const torch::Tensor kept = part(in, sent, me);
  if (mine.size(0) != kept.size(0))
    fail("all_to_all: rank ", me, " sends itself ", kept.size(0), " rows (its input's split) but receives ", mine.size(0),
         " (its output's)");
  std::vector<Transfer> transfers;
  for (int r = 0; r < size(); ++r) {
    if (r == me) continue;
    // Parts of no rows are skipped on both sides: the splits agree on them.
    if (const torch::Tensor to = part(in, sent, r); to.size(0) > 0) transfers.push_back({to, r, true});
    if (torch::Tensor from = part(out, received, r); from.size(0) > 0) transfers.push_back({from, r, false});
  }
  auto pending = exchange_async(std::move(transfers), "all_to_all");
  mine.copy_(kept);
  pending->wait();
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

#ifndef TRIDENT_WITH_NCCL
bool nccl_uses_torch_streams() { return false; }
#endif

namespace {
bool has_backend(Backend backend) {
  const auto built = split(available_backends(), ' ');
  return std::find(built.begin(), built.end(), name(backend)) != built.end();
}
}  // namespace

CommOptions comm_options(const Config& config) {
  CommOptions options;
  options.backend = config.parallel.backend;
  options.timeout = std::chrono::seconds(config.parallel.timeout_s);
  options.device = config.train.device == TrainDevice::cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  return options;
}

void check_backend(const LaunchInfo& launch, const CommOptions& options) {
  const Backend backend = options.backend;
  const bool cuda = options.device.is_cuda(), torchrun = launch.launcher == "torchrun";
  const bool several = launch.world_size > 1;
  if (backend != Backend::automatic && !has_backend(backend))
    fail("parallel.backend=", name(backend), " is not built into this trident (it has: ", available_backends(), ")");
  if (backend == Backend::nccl && !cuda) fail("parallel.backend=nccl needs train.device=cuda");
  if (cuda && (backend == Backend::mpi || backend == Backend::gloo))
    fail("train.device=cuda needs parallel.backend=nccl or auto, not ", name(backend), " (which moves CPU tensors)");
  if (backend == Backend::mpi && torchrun)
    fail("parallel.backend=mpi needs a launch by mpirun or srun, but this job was launched with ",
         "torchrun-style variables; use parallel.backend=gloo");
  if (backend == Backend::gloo && !torchrun)
    fail("parallel.backend=gloo needs MASTER_ADDR/MASTER_PORT (a torchrun-style launch); this job ",
         "was launched by ", launch.launcher);
  if (cuda && backend == Backend::automatic && !has_backend(Backend::nccl))
    fail("train.device=cuda needs the NCCL backend, which is not built into this trident (it has: ",
         available_backends(), ")");
  const Backend cpu = torchrun ? Backend::gloo : Backend::mpi;
  if (several && !has_backend(cpu))
    fail("processes launched by ", launch.launcher, " connect through ", name(cpu),
         ", which is not built into this trident (it has: ", available_backends(), ")");
}

namespace {
// Every world of several processes is watched by the flight recorder.
std::shared_ptr<Communicator> recorded_world(std::shared_ptr<Communicator> world) {
  std::vector<int> ranks(size_t(world->size()));
  for (int r = 0; r < world->size(); ++r) ranks[size_t(r)] = r;
  return recorded(std::move(world), std::move(ranks));
}
}  // namespace

std::shared_ptr<Communicator> connect_world(const LaunchInfo& launch, const CommOptions& options) {
  check_backend(launch, options);
  if (launch.world_size == 1 && options.backend != Backend::mpi) return make_self_communicator();
#ifdef TRIDENT_WITH_GLOO
  if (launch.launcher == "torchrun") return recorded_world(make_gloo_world_communicator(launch, options.timeout));
#endif
#ifdef TRIDENT_WITH_MPI
  auto world = make_mpi_world_communicator(options.timeout);
  // Launcher variables copied into a shell or a script outside mpirun/srun: MPI started alone.
  if (world->size() != launch.world_size) {
    const bool slurm = launch.launcher == "slurm";
    fail("launch environment: ", slurm ? "SLURM_NTASKS" : "OMPI_COMM_WORLD_SIZE", "=", launch.world_size,
         " but MPI started ", world->size(), " process(es): this process was not started by ",
         slurm ? "srun with MPI support (srun --mpi=pmix)" : "mpirun", "; unset ",
         slurm ? "SLURM_NTASKS and SLURM_PROCID" : "the OMPI_COMM_WORLD_* variables", " to run a single process");
  }
  return recorded_world(std::move(world));
#endif
  TRIDENT_CHECK(false, "check_backend let through a launch that no backend can connect");
  return nullptr;
}

std::shared_ptr<Communicator> device_world(std::shared_ptr<Communicator> cpu_world,
                                           const LaunchInfo& launch, const CommOptions& options) {
  if (!options.device.is_cuda()) return cpu_world;
#ifdef TRIDENT_WITH_NCCL
  return recorded_world(make_nccl_world_communicator(launch, *cpu_world, options.timeout));
#else
  (void)launch;
  fail("train.device=cuda needs the NCCL backend, which is not built into this trident");
#endif
}

std::shared_ptr<Communicator> make_world_communicator(const LaunchInfo& launch,
                                                      const CommOptions& options) {
  return device_world(connect_world(launch, options), launch, options);
}

std::string Communicator::describe_call(const char* operation) const {
  return str(backend(), " ", operation, " on the ", name(), " group");
}

}  // namespace trident
