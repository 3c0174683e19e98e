// NCCL backend: CUDA tensors; each communicator runs its operations on a stream of its own,
// ordered with LibTorch's current (compute) stream by CUDA events and never by the host:
//
//   compute  ──kernels──●ready                       ◆wait(done)──kernels that use the result──
//                        ╲                          ╱
//   comm                  ◆wait(ready)──NCCL op──●done
//
// so a bucket's reduction runs beside the backward that follows it, a ZeRO-3 prefetch beside
// the forward, a pipeline receive beside the computation it was posted before. Blocking calls
// are the same with wait() at once. The memory an operation reads and writes is recorded on the
// comm stream (the caching allocator's recordStream), so that freeing it early cannot give it to
// a kernel on the compute stream while the comm stream still uses it.
// The unique id travels from rank 0 over a CPU bootstrap communicator; sub-groups come from
// ncclCommSplit. Communicators are non-blocking and watched (below): a peer that never answers
// ends the job after parallel.timeout_s instead of hanging it.
#include <cuda_runtime.h>
#include <nccl.h>

#ifdef TRIDENT_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "parallel/comm/async_watchdog.h"
#include "parallel/comm/backends.h"
#include "parallel/comm/launch.h"

namespace trident {
namespace {

void check(ncclResult_t result, const char* operation) {
  if (result != ncclSuccess) fail("NCCL ", operation, " failed: ", ncclGetErrorString(result));
}

void check(cudaError_t result, const char* operation) {
  if (result != cudaSuccess) fail("CUDA ", operation, " failed: ", cudaGetErrorString(result));
}

// LibTorch's current stream on `device`: where the computation around a call runs.
cudaStream_t compute_stream(int device) {
#ifdef TRIDENT_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(device)).stream();
#else
  (void)device;
  return nullptr;  // the legacy default stream, LibTorch's default when it has no CUDA streams
#endif
}

// A CUDA event without timing, destroyed with its last owner (the pending call or the probe).
using Event = std::shared_ptr<CUevent_st>;
Event record_event(cudaStream_t stream) {
  cudaEvent_t event;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event create");
  Event owned(event, [](cudaEvent_t e) { cudaEventDestroy(e); });
  check(cudaEventRecord(event, stream), "event record");
  return owned;
}

// An operation on a communication stream; wait() orders the caller's current stream after it
// (the host does not wait).
class StreamPending : public PendingCollective {
 public:
  StreamPending(Event done, int device) : done_(std::move(done)), device_(device) {}
  void wait() override {
    if (done_) check(cudaStreamWaitEvent(compute_stream(device_), done_.get(), 0), "stream wait");
    done_.reset();
  }

 private:
  Event done_;
  int device_;
};

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
// (parallel/comm/async_watchdog.h) can abort a communicator whose peer never comes. Every
// operation is watched from its enqueue to a CUDA event recorded after it.
ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Waits (polling) until a non-blocking call on `comm` has finished being issued. A call that
// creates `comm` (init, split) may return ncclSuccess while the new communicator still
// initialises, so its state is read even then: it is usable only once that is ncclSuccess.
void settle(ncclComm_t comm, ncclResult_t result, const std::string& what, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (result == ncclSuccess) ncclCommGetAsyncError(comm, &result);
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
    // Non-blocking: no implicit order with the legacy default stream. The highest priority, so
    // that a collective's kernels are scheduled ahead of compute kernels queued beside them.
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities");
    check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest), "stream create");
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
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  torch::Device device() const override { return torch::Device(torch::kCUDA, c10::DeviceIndex(device_)); }

  void all_reduce(torch::Tensor& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }
  std::unique_ptr<PendingCollective> all_reduce_async(torch::Tensor& t, ReduceOp op) override {
    const auto type = nccl_type(t, "all_reduce");
    return issue("all_reduce", {t}, [&](cudaStream_t stream) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), type, nccl_op(op), comm_, stream);
    });
  }

  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    reduce_scatter_async(out, in, op)->wait();
  }
  std::unique_ptr<PendingCollective> reduce_scatter_async(torch::Tensor& out, const torch::Tensor& in,
                                                          ReduceOp op) override {
    require_chunks(in, out, size_, "reduce_scatter");
    const auto type = nccl_type(out, "reduce_scatter");
    return issue("reduce_scatter", {out, in}, [&](cudaStream_t stream) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()), type, nccl_op(op), comm_, stream);
    });
  }

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override { all_gather_async(out, in)->wait(); }
  std::unique_ptr<PendingCollective> all_gather_async(torch::Tensor& out, const torch::Tensor& in) override {
    require_chunks(out, in, size_, "all_gather");
    const auto type = nccl_type(in, "all_gather");
    return issue("all_gather", {out, in}, [&](cudaStream_t stream) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()), type, comm_, stream);
    });
  }

  void broadcast(torch::Tensor& t, int root) override {
    const auto type = nccl_type(t, "broadcast");
    issue("broadcast", {t}, [&](cudaStream_t stream) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), type, root, comm_, stream);
    })->wait();
  }

  void send(const torch::Tensor& t, int peer) override {
    std::vector<Transfer> transfers = {{t, peer, true}};
    exchange(transfers);
  }
  void recv(torch::Tensor& t, int peer) override {
    std::vector<Transfer> transfers = {{t, peer, false}};
    exchange(transfers);
  }

  void exchange(std::vector<Transfer>& transfers) override { exchange_async(transfers, "exchange")->wait(); }
  std::unique_ptr<PendingCollective> exchange_async(std::vector<Transfer> transfers, const char* operation) override {
    // Checked before the group starts: an error inside ncclGroupStart/End would leave it open.
    std::vector<torch::Tensor> tensors;
    std::vector<ncclDataType_t> types;
    for (const auto& t : transfers) {
      types.push_back(nccl_type(t.tensor, t.send ? "send" : "recv"));
      tensors.push_back(t.tensor);
    }
    if (tensors.empty()) return std::make_unique<StreamPending>(nullptr, device_);
    return issue(operation, tensors, [&](cudaStream_t stream) {
      ncclResult_t result = ncclGroupStart();
      for (size_t i = 0; i < transfers.size() && result == ncclSuccess; ++i) {
        const Transfer& t = transfers[i];
        result = t.send ? ncclSend(t.tensor.data_ptr(), size_t(t.tensor.numel()), types[i], t.peer, comm_, stream)
                        : ncclRecv(t.tensor.data_ptr(), size_t(t.tensor.numel()), types[i], t.peer, comm_, stream);
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
    check(cudaStreamSynchronize(compute_stream(device_)), "barrier");
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    ncclComm_t child = nullptr;
    ncclConfig_t config = non_blocking_config();
    const ncclResult_t issued = ncclCommSplit(comm_, color, key, &child, &config);
    return std::make_shared<NcclCommunicator>(await_split(issued, &child, describe_call("split")), device_, timeout_);
  }

 private:
  // Issues one operation on this communicator's stream after what the compute stream has
  // queued so far, waits until NCCL has taken it, and watches it until an event recorded after
  // it completes. The memory of `tensors` is marked in use by this stream too, so that
  // LibTorch's caching allocator, should the caller free them first, gives it to no other
  // kernel before the operation is done.
  template <typename Call>
  std::unique_ptr<PendingCollective> issue(const char* operation, const std::vector<torch::Tensor>& tensors,
                                           Call call) {
    const std::string what = describe_call(operation);
    check(cudaStreamWaitEvent(stream_, record_event(compute_stream(device_)).get(), 0), "stream wait");
    settle(comm_, call(stream_), what, timeout_);
#ifdef TRIDENT_TORCH_CUDA
    const auto stream = c10::cuda::getStreamFromExternal(stream_, c10::DeviceIndex(device_));
    for (const auto& t : tensors) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
#else
    (void)tensors;  // without a CUDA LibTorch there are no CUDA tensors (nccl_type refuses others)
#endif
    Event done = record_event(stream_);
    nccl_watchdog().watch(str(what, " (rank ", rank_, ")"), timeout_,
                          [done] { return cudaEventQuery(done.get()) != cudaErrorNotReady; });
    return std::make_unique<StreamPending>(std::move(done), device_);
  }

  // Non-blocking, NCCL writes a split's new communicator into *child only when the split is
  // done (NULL until then, its failures reported on the parent); it is usable once settled.
  ncclComm_t await_split(ncclResult_t result, ncclComm_t* child, const std::string& what) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (result == ncclSuccess || result == ncclInProgress) {
      if (ncclComm_t ready = __atomic_load_n(child, __ATOMIC_ACQUIRE)) {
        settle(ready, ncclSuccess, what, timeout_);
        return ready;
      }
      if (std::chrono::steady_clock::now() > deadline)
        fail(what, " was not done after ", timeout_.count(), " s (parallel.timeout_s): a peer is stopped, stuck or lost");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      ncclCommGetAsyncError(comm_, &result);
    }
    fail(what, " failed: ", ncclGetErrorString(result), " (", ncclGetLastError(comm_), ")");
  }

  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;  // this communicator's operations, in the order issued
  int device_;
  std::chrono::seconds timeout_;
  int rank_ = 0, size_ = 1;
  int64_t watch_key_ = -1;
};

}  // namespace

bool nccl_uses_torch_streams() {
#ifdef TRIDENT_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

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

  ncclComm_t comm = nullptr;
  ncclConfig_t config = non_blocking_config();
  // Two statements: `comm` is read only after the call has written it.
  const ncclResult_t issued = ncclCommInitRankConfig(&comm, int(launch.world_size), id, int(launch.rank), &config);
  settle(comm, issued, str("NCCL init of ", launch.world_size, " ranks"), timeout);
  return std::make_shared<NcclCommunicator>(comm, device, timeout);
}

}  // namespace trident
