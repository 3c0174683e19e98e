// NCCL backend: CUDA tensors, collectives enqueued on LibTorch's current CUDA stream, so they
// are ordered with the kernels around them and need no host synchronisation. The unique id
// travels from rank 0 over a CPU bootstrap communicator; sub-groups come from ncclCommSplit.
// Communicators are non-blocking and watched (below): a peer that never answers ends the job
// after parallel.timeout_s instead of hanging it.
#include <cuda_runtime.h>
#include <nccl.h>

#ifdef TRIDENT_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "parallel/async_watchdog.h"
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

// Communicators are non-blocking (ncclConfig_t.blocking = 0): a call may return while NCCL
// still works on it (ncclInProgress), and nothing NCCL does blocks the host, so the watchdog
// (parallel/async_watchdog.h) can abort a communicator whose peer never comes. Every
// operation is watched from its enqueue to a CUDA event recorded after it.
ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Waits (polling) until a non-blocking call on `comm` has finished being issued.
void settle(ncclComm_t comm, ncclResult_t result, const std::string& what, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (result == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline)
      fail(what, " was still being issued after ", timeout.count(), " s (parallel.timeout_s): a peer is stopped, stuck or lost");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    ncclCommGetAsyncError(comm, &result);
  }
  if (result != ncclSuccess) fail(what, " failed: ", ncclGetErrorString(result), " (", ncclGetLastError(comm), ")");
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, std::chrono::seconds timeout)
      : comm_(comm), device_(device), timeout_(timeout) {
    check(ncclCommUserRank(comm_, &rank_), "rank");
    check(ncclCommCount(comm_, &size_), "count");
    watch_key_ = nccl_watchdog().add_communicator(
        str("NCCL rank ", rank_, " of ", size_),
        [comm = comm_]() -> std::string {
          ncclResult_t state = ncclSuccess;
          ncclCommGetAsyncError(comm, &state);
          if (state == ncclSuccess || state == ncclInProgress) return "";
          return str(ncclGetErrorString(state), " (", ncclGetLastError(comm), ")");
        },
        [comm = comm_] { ncclCommAbort(comm); });
  }
  ~NcclCommunicator() override {
    nccl_watchdog().remove_communicator(watch_key_);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    issue("all_reduce", t, [&](cudaStream_t stream) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t, "all_reduce"), nccl_op(op),
                           comm_, stream);
    });
  }

  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    require_chunks(in, out, size_, "reduce_scatter");
    issue("reduce_scatter", out, [&](cudaStream_t stream) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()), nccl_type(out, "reduce_scatter"),
                               nccl_op(op), comm_, stream);
    });
  }

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    require_chunks(out, in, size_, "all_gather");
    issue("all_gather", out, [&](cudaStream_t stream) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()), nccl_type(in, "all_gather"), comm_,
                           stream);
    });
  }

  void broadcast(torch::Tensor& t, int root) override {
    issue("broadcast", t, [&](cudaStream_t stream) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t, "broadcast"), root, comm_,
                           stream);
    });
  }

  void send(const torch::Tensor& t, int peer) override {
    issue("send", t, [&](cudaStream_t stream) {
      return ncclSend(t.data_ptr(), size_t(t.numel()), nccl_type(t, "send"), peer, comm_, stream);
    });
  }

  void recv(torch::Tensor& t, int peer) override {
    issue("recv", t, [&](cudaStream_t stream) {
      return ncclRecv(t.data_ptr(), size_t(t.numel()), nccl_type(t, "recv"), peer, comm_, stream);
    });
  }

  void exchange(std::vector<Transfer>& transfers) override {
    if (transfers.empty()) return;
    issue("exchange", transfers.front().tensor, [&](cudaStream_t stream) {
      ncclResult_t result = ncclGroupStart();
      for (auto& t : transfers) {
        if (result != ncclSuccess) break;
        const auto type = nccl_type(t.tensor, "exchange");
        result = t.send ? ncclSend(t.tensor.data_ptr(), size_t(t.tensor.numel()), type, t.peer, comm_, stream)
                        : ncclRecv(t.tensor.data_ptr(), size_t(t.tensor.numel()), type, t.peer, comm_, stream);
      }
      const ncclResult_t end = ncclGroupEnd();
      return result != ncclSuccess ? result : end;
    });
  }

  // The one place that waits on the host: an all-reduce of one element, then a stream sync
  // (the watchdog ends the job if the all-reduce never completes).
  void barrier() override {
    auto token = torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, device_));
    all_reduce(token, ReduceOp::sum);
    check(cudaStreamSynchronize(current_stream(token)), "barrier");
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    ncclComm_t child;
    ncclConfig_t config = non_blocking_config();
    // Non-blocking: the new communicator reports when it is ready.
    settle(child, ncclCommSplit(comm_, color, key, &child, &config), describe_call("split"), timeout_);
    return std::make_shared<NcclCommunicator>(child, device_, timeout_);
  }

 private:
  // Issues one operation on the tensor's current stream, waits until NCCL has taken it, and
  // watches it until an event recorded after it completes.
  template <typename Call>
  void issue(const char* operation, const torch::Tensor& tensor, Call call) {
    const cudaStream_t stream = current_stream(tensor);
    const std::string what = describe_call(operation);
    settle(comm_, call(stream), what, timeout_);
    cudaEvent_t done;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event create");
    check(cudaEventRecord(done, stream), "event record");
    nccl_watchdog().watch(str(what, " (rank ", rank_, ")"), timeout_, [done] {
      if (cudaEventQuery(done) == cudaErrorNotReady) return false;
      cudaEventDestroy(done);
      return true;
    });
  }

  ncclComm_t comm_;
  int device_;
  std::chrono::seconds timeout_;
  int rank_ = 0, size_ = 1;
  int64_t watch_key_ = -1;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_world_communicator(const LaunchInfo& launch, Communicator& bootstrap,
                                                           std::chrono::seconds timeout) {
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
  ncclConfig_t config = non_blocking_config();
  settle(comm, ncclCommInitRankConfig(&comm, int(launch.world_size), id, int(launch.rank), &config),
         str("NCCL init of ", launch.world_size, " ranks"), timeout);
  return std::make_shared<NcclCommunicator>(comm, device, timeout);
}

}  // namespace trident
