// NCCL backend: CUDA tensors, collectives enqueued on LibTorch's current CUDA stream, so they
// are ordered with the kernels around them and need no host synchronisation. The unique id
// travels from rank 0 over a CPU bootstrap communicator; sub-groups come from ncclCommSplit.
#include <cuda_runtime.h>
#include <nccl.h>

#ifdef TRIDENT_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstring>

#include "core/error.h"
#include "parallel/comm_backends.h"
#include "parallel/launch.h"

namespace trident {
namespace {

void check(ncclResult_t result, const char* operation) {
  if (result != ncclSuccess) fail("NCCL ", operation, " failed: ", ncclGetErrorString(result));
}

void check(cudaError_t result, const char* operation) {
  if (result != cudaSuccess) fail("CUDA ", operation, " failed: ", cudaGetErrorString(result));
}

cudaStream_t current_stream(const torch::Tensor& tensor) {
#ifdef TRIDENT_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(tensor.device().index()).stream();
#else
  (void)tensor;
  return nullptr;  // the legacy default stream, LibTorch's default when it has no CUDA streams
#endif
}

ncclDataType_t nccl_type(const torch::Tensor& t, const char* operation) {
  if (!t.is_cuda()) fail(operation, ": the NCCL backend takes CUDA tensors");
  require_contiguous(t, operation);
  switch (t.scalar_type()) {
    case torch::kFloat: return ncclFloat32;
    case torch::kDouble: return ncclFloat64;
    case torch::kHalf: return ncclFloat16;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kLong: return ncclInt64;
    case torch::kInt: return ncclInt32;
    case torch::kByte: return ncclUint8;
    default: fail(operation, ": dtype ", t.scalar_type(), " is not supported by NCCL");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device) : comm_(comm), device_(device) {
    check(ncclCommUserRank(comm_, &rank_), "rank");
    check(ncclCommCount(comm_, &size_), "count");
  }
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    check(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t, "all_reduce"),
                        nccl_op(op), comm_, current_stream(t)),
          "all_reduce");
  }

  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    require_chunks(in, out, size_, "reduce_scatter");
    check(ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                            nccl_type(out, "reduce_scatter"), nccl_op(op), comm_,
                            current_stream(out)),
          "reduce_scatter");
  }

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    require_chunks(out, in, size_, "all_gather");
    check(ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()), nccl_type(in, "all_gather"),
                        comm_, current_stream(out)),
          "all_gather");
  }

  void broadcast(torch::Tensor& t, int root) override {
    check(ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t, "broadcast"),
                        root, comm_, current_stream(t)),
          "broadcast");
  }

  void send(const torch::Tensor& t, int peer) override {
    check(ncclSend(t.data_ptr(), size_t(t.numel()), nccl_type(t, "send"), peer, comm_,
                   current_stream(t)),
          "send");
  }

  void recv(torch::Tensor& t, int peer) override {
    check(ncclRecv(t.data_ptr(), size_t(t.numel()), nccl_type(t, "recv"), peer, comm_,
                   current_stream(t)),
          "recv");
  }

  void exchange(std::vector<Transfer>& transfers) override {
    check(ncclGroupStart(), "group start");
    for (auto& t : transfers) {
      const auto type = nccl_type(t.tensor, "exchange");
      check(t.send ? ncclSend(t.tensor.data_ptr(), size_t(t.tensor.numel()), type, t.peer, comm_,
                              current_stream(t.tensor))
                   : ncclRecv(t.tensor.data_ptr(), size_t(t.tensor.numel()), type, t.peer, comm_,
                              current_stream(t.tensor)),
            "exchange");
    }
    check(ncclGroupEnd(), "group end");
  }

  // The one place that waits on the host: an all-reduce of one element, then a stream sync.
  void barrier() override {
    auto token = torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, device_));
    all_reduce(token, ReduceOp::sum);
    check(cudaStreamSynchronize(current_stream(token)), "barrier");
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    ncclComm_t child;
    check(ncclCommSplit(comm_, color, key, &child, nullptr), "split");
    return std::make_shared<NcclCommunicator>(child, device_);
  }

 private:
  ncclComm_t comm_;
  int device_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_world_communicator(const LaunchInfo& launch,
                                                           Communicator& bootstrap) {
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "device count");
  if (devices == 0) fail("parallel.backend=nccl needs a CUDA device; none is visible");
  const int device = int(launch.local_rank % devices);
  check(cudaSetDevice(device), "set device");

  ncclUniqueId id;
  if (bootstrap.rank() == 0) check(ncclGetUniqueId(&id), "unique id");
  auto bytes = torch::empty({int64_t(sizeof id)}, torch::kByte);
  std::memcpy(bytes.data_ptr(), &id, sizeof id);
  bootstrap.broadcast(bytes, 0);
  std::memcpy(&id, bytes.data_ptr(), sizeof id);

  ncclComm_t comm;
  check(ncclCommInitRank(&comm, int(launch.world_size), id, int(launch.rank)), "init");
  return std::make_shared<NcclCommunicator>(comm, device);
}

}  // namespace trident
