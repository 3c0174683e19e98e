// MPI backend: CPU tensors, under mpirun. 16-bit floats are reduced in fp32.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "parallel/comm/backends.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/watchdog.h"

namespace trident {
namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  fail("MPI ", what, " failed: ", std::string(message, size_t(length)));
}

MPI_Datatype mpi_type(const torch::Tensor& t, const char* operation) {
  switch (t.scalar_type()) {
    case torch::kFloat: return MPI_FLOAT;
    case torch::kDouble: return MPI_DOUBLE;
    case torch::kLong: return MPI_INT64_T;
    case torch::kInt: return MPI_INT32_T;
    case torch::kByte: return MPI_UINT8_T;
    // Moved as raw 16-bit words (no arithmetic): reductions widen to fp32 first.
    case torch::kBFloat16:
    case torch::kHalf: return MPI_UINT16_T;
    default: fail(operation, ": dtype ", t.scalar_type(), " is not supported by the MPI backend");
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

int count_of(const torch::Tensor& t, const char* operation) {
  require_contiguous(t, operation);
  if (t.numel() > INT_MAX) fail(operation, ": ", t.numel(), " elements exceed MPI's int count");
  if (!t.device().is_cpu()) fail(operation, ": the MPI backend takes CPU tensors");
  return int(t.numel());
}

// The watchdog's deadline for MPI_Finalize, which waits for every rank: the world's timeout.
std::chrono::seconds finalize_timeout{300};

// MPI is initialised once per process and finalised at exit.
void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
      std::atexit([] {
        if (!mpi_running()) return;
        CallWatch watch("MPI_Finalize", finalize_timeout);
        MPI_Finalize();
      });
    }
  });
}

class MpiPendingReduction : public WidenedReduction {
 public:
  MpiPendingReduction(const torch::Tensor& target, ReduceOp op, int size, std::string call,
                      std::chrono::seconds timeout)
      : WidenedReduction(target, op, size), call_(std::move(call)), timeout_(timeout) {}
  MPI_Request* request() { return &request_; }

 private:
  void wait_for_transfer() override {
    CallWatch watch(call_, timeout_);
    check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "wait");
  }
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::string call_;
  std::chrono::seconds timeout_;
};

// The input (widened like the output for 16-bit floats) must live until the request completes.
class MpiPendingReduceScatter : public MpiPendingReduction {
 public:
  MpiPendingReduceScatter(const torch::Tensor& out, const torch::Tensor& in, ReduceOp op, int size,
                          std::string call, std::chrono::seconds timeout)
      : MpiPendingReduction(out, op, size, std::move(call), timeout),
        input_(is_16bit_float(in) ? in.to(torch::kFloat) : in) {}
  const torch::Tensor& input() const { return input_; }

 private:
  torch::Tensor input_;
};

// An all-gather in flight; its tensors live here until it completes.
struct MpiPendingAllGather : PendingCollective {
  MpiPendingAllGather(torch::Tensor out, torch::Tensor in, std::string call, std::chrono::seconds timeout)
      : out(std::move(out)), in(std::move(in)), call(std::move(call)), timeout(timeout) {}
  void wait() override {
    CallWatch watch(call, timeout);
    check(MPI_Wait(&request, MPI_STATUS_IGNORE), "all_gather");
  }
  torch::Tensor out, in;
  MPI_Request request = MPI_REQUEST_NULL;
  std::string call;
  std::chrono::seconds timeout;
};

// Point-to-point transfers in flight; their tensors live here until they complete.
struct MpiPendingExchange : PendingCollective {
  MpiPendingExchange(std::vector<Communicator::Transfer> transfers, const char* operation, std::string call,
                     std::chrono::seconds timeout)
      : transfers(std::move(transfers)), requests(this->transfers.size(), MPI_REQUEST_NULL), operation(operation),
        call(std::move(call)), timeout(timeout) {}
  void wait() override {
    CallWatch watch(call, timeout);
    check(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE), operation);
  }
  std::vector<Communicator::Transfer> transfers;
  std::vector<MPI_Request> requests;
  const char* operation;  // a string literal: "exchange", "all_to_all"
  std::string call;
  std::chrono::seconds timeout;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::chrono::seconds timeout) : comm_(comm), timeout_(timeout) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_WORLD && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override { all_reduce_async(tensor, op)->wait(); }

  std::unique_ptr<PendingCollective> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override {
    auto pending = std::make_unique<MpiPendingReduction>(tensor, op, size_, describe_call("all_reduce"), timeout_);
    torch::Tensor& buffer = pending->buffer();
    check(MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), count_of(buffer, "all_reduce"),
                         mpi_type(buffer, "all_reduce"), mpi_op(op), comm_, pending->request()),
          "all_reduce");
    return pending;
  }

  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    reduce_scatter_async(out, in, op)->wait();
  }

  std::unique_ptr<PendingCollective> reduce_scatter_async(torch::Tensor& out, const torch::Tensor& in,
                                                          ReduceOp op) override {
    require_chunks(in, out, size_, "reduce_scatter");
    auto pending = std::make_unique<MpiPendingReduceScatter>(out, in, op, size_,
                                                             describe_call("reduce_scatter"), timeout_);
    torch::Tensor& buffer = pending->buffer();
    check(MPI_Ireduce_scatter_block(pending->input().data_ptr(), buffer.data_ptr(),
                                    count_of(buffer, "reduce_scatter"), mpi_type(buffer, "reduce_scatter"),
                                    mpi_op(op), comm_, pending->request()),
          "reduce_scatter");
    return pending;
  }

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override { all_gather_async(out, in)->wait(); }

  std::unique_ptr<PendingCollective> all_gather_async(torch::Tensor& out, const torch::Tensor& in) override {
    require_chunks(out, in, size_, "all_gather");
    const int count = count_of(in, "all_gather");
    auto pending = std::make_unique<MpiPendingAllGather>(out, in, describe_call("all_gather"), timeout_);
    check(MPI_Iallgather(in.data_ptr(), count, mpi_type(in, "all_gather"), out.data_ptr(), count,
                         mpi_type(out, "all_gather"), comm_, &pending->request),
          "all_gather");
    return pending;
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    CallWatch watch(describe_call("broadcast"), timeout_);
    check(MPI_Bcast(tensor.data_ptr(), count_of(tensor, "broadcast"), mpi_type(tensor, "broadcast"),
                    root, comm_),
          "broadcast");
  }

  void send(const torch::Tensor& tensor, int peer) override {
    CallWatch watch(describe_call("send"), timeout_);
    check(MPI_Send(tensor.data_ptr(), count_of(tensor, "send"), mpi_type(tensor, "send"), peer, 0,
                   comm_),
          "send");
  }

  void recv(torch::Tensor& tensor, int peer) override {
    CallWatch watch(describe_call("recv"), timeout_);
    check(MPI_Recv(tensor.data_ptr(), count_of(tensor, "recv"), mpi_type(tensor, "recv"), peer, 0,
                   comm_, MPI_STATUS_IGNORE),
          "recv");
  }

  void exchange(std::vector<Transfer>& transfers) override { exchange_async(transfers, "exchange")->wait(); }

  std::unique_ptr<PendingCollective> exchange_async(std::vector<Transfer> transfers, const char* operation) override {
    auto pending = std::make_unique<MpiPendingExchange>(std::move(transfers), operation, describe_call(operation), timeout_);
    for (size_t i = 0; i < pending->transfers.size(); ++i) {
      auto& t = pending->transfers[i];
      const int count = count_of(t.tensor, operation);
      const MPI_Datatype type = mpi_type(t.tensor, operation);
      check(t.send ? MPI_Isend(t.tensor.data_ptr(), count, type, t.peer, 0, comm_, &pending->requests[i])
                   : MPI_Irecv(t.tensor.data_ptr(), count, type, t.peer, 0, comm_, &pending->requests[i]),
            operation);
    }
    return pending;
  }

  void barrier() override {
    CallWatch watch(describe_call("barrier"), timeout_);
    check(MPI_Barrier(comm_), "barrier");
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    MPI_Comm child;
    {
      CallWatch watch(describe_call("split"), timeout_);
      check(MPI_Comm_split(comm_, color, key, &child), "split");
    }
    auto group = std::make_shared<MpiCommunicator>(child, timeout_);
    group->set_name("split");
    return group;
  }

 private:
  MPI_Comm comm_;
  std::chrono::seconds timeout_;
  int rank_ = 0, size_ = 1;
};

// Open MPI's mpirun (ORTE, which gives its processes OMPI_MCA_orte_hnp_uri) ends every process
// of the job when one exits with a non-zero status, unless orte_abort_on_non_zero_status is
// off. There a failing rank exits rather than calling MPI_Abort: Open MPI 4.1's mpirun
// sometimes garbles MPI_Abort's notice while it ends the job, printing "ORTE_ERROR_LOG: Data
// unpack ... show_help.c" in place of it. Other launchers (MPICH's, srun) get MPI_Abort.
bool open_mpi_mpirun_ends_job_on_failed_exit() {
  if (std::getenv("OMPI_MCA_orte_hnp_uri") == nullptr) return false;
  const char* setting = std::getenv("OMPI_MCA_orte_abort_on_non_zero_status");
  if (setting == nullptr) return true;
  const std::string value = setting;
  return value != "0" && value != "false" && value != "no";
}

}  // namespace

std::shared_ptr<Communicator> make_mpi_world_communicator(std::chrono::seconds timeout) {
  ensure_initialized();
  finalize_timeout = timeout;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) stop_with_the_launcher();
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, timeout);
}

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void abort_mpi_job(int exit_code) {
  // A process that MPI started alone (launcher variables without mpirun) has no job to end, and
  // MPI_Abort would only add Open MPI's notice to the error.
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1 || open_mpi_mpirun_ends_job_on_failed_exit()) std::_Exit(exit_code);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace trident
