// Gloo backend through LibTorch's c10d: CPU tensors, env:// launch (TCPStore at
// MASTER_ADDR:MASTER_PORT, rank 0 serving it unless torchrun's agent does).
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

#include "core/error.h"
#include "parallel/comm_backends.h"
#include "parallel/launch.h"

namespace trident {
namespace {

c10d::ReduceOp gloo_op(ReduceOp op) {
  return op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
}

// Collectives that only move data see bf16 as fp16, which Gloo handles: same bits, no arithmetic.
torch::Tensor movable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kHalf) : t;
}

template <typename WorkPtr>
void wait(const WorkPtr& work, const char* operation) {
  try {
    work->wait();
  } catch (const c10::Error& e) {
    fail("gloo ", operation, " failed (a peer may have exited): ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail("gloo ", operation, " failed (a peer may have exited): ", e.what());
  }
}

template <typename WorkPtr>
class GlooPendingAllReduce : public WidenedReduction {
 public:
  using WidenedReduction::WidenedReduction;
  void start(WorkPtr work) { work_ = std::move(work); }

 private:
  void wait_for_transfer() override { trident::wait(work_, "all_reduce"); }
  WorkPtr work_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                   std::chrono::seconds timeout)
      : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
    options->devices.push_back(interface
                                   ? c10d::ProcessGroupGloo::createDeviceForInterface(interface)
                                   : c10d::ProcessGroupGloo::createDefaultDevice());
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, size, options);
    } catch (const std::exception& e) {
      fail("gloo: connecting ", size, " processes failed: ", e.what());
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override { all_reduce_async(tensor, op)->wait(); }

  std::unique_ptr<PendingCollective> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override {
    require_contiguous(tensor, "all_reduce");
    using Work = decltype(group_->barrier());
    auto pending = std::make_unique<GlooPendingAllReduce<Work>>(tensor, op, size_);
    std::vector<torch::Tensor> tensors = {pending->buffer()};
    c10d::AllreduceOptions options;
    options.reduceOp = gloo_op(op);
    pending->start(group_->allreduce(tensors, options));
    return pending;
  }

  // Gloo has no reduce-scatter in every LibTorch: all-reduce, then keep this rank's chunk.
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    require_chunks(in, out, size_, "reduce_scatter");
    torch::Tensor whole = in.clone();
    all_reduce(whole, op);
    out.copy_(whole.view(-1).narrow(0, rank_ * out.numel(), out.numel()).view_as(out));
  }

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    require_chunks(out, in, size_, "all_gather");
    torch::Tensor flat_out = movable(out).view(-1);
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(flat_out.narrow(0, r * in.numel(), in.numel()));
    std::vector<torch::Tensor> inputs = {movable(in).view(-1)};
    wait(group_->allgather(outputs, inputs), "all_gather");
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    require_contiguous(tensor, "broadcast");
    std::vector<torch::Tensor> tensors = {movable(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    wait(group_->broadcast(tensors, options), "broadcast");
  }

  void send(const torch::Tensor& tensor, int peer) override {
    require_contiguous(tensor, "send");
    std::vector<torch::Tensor> tensors = {movable(tensor)};
    wait(group_->send(tensors, peer, 0), "send");
  }

  void recv(torch::Tensor& tensor, int peer) override {
    require_contiguous(tensor, "recv");
    std::vector<torch::Tensor> tensors = {movable(tensor)};
    wait(group_->recv(tensors, peer, 0), "recv");
  }

  void exchange(std::vector<Transfer>& transfers) override {
    std::vector<decltype(group_->barrier())> works;
    for (auto& t : transfers) {
      require_contiguous(t.tensor, "exchange");
      std::vector<torch::Tensor> tensors = {movable(t.tensor)};
      works.push_back(t.send ? group_->send(tensors, t.peer, 0) : group_->recv(tensors, t.peer, 0));
    }
    for (auto& work : works) wait(work, "exchange");
  }

  void barrier() override { wait(group_->barrier(), "barrier"); }

  // c10d has no split for Gloo: exchange (color, key), then connect each new group through
  // its own prefix of the store.
  std::shared_ptr<Communicator> split(int color, int key) override {
    auto mine = torch::tensor({int64_t(color), int64_t(key)}, torch::kLong);
    auto all = torch::empty({size_, 2}, torch::kLong);
    all_gather(all, mine);
    std::vector<std::pair<int64_t, int>> members;  // (key, old rank) of my color
    for (int r = 0; r < size_; ++r)
      if (all[r][0].item<int64_t>() == color) members.emplace_back(all[r][1].item<int64_t>(), r);
    std::sort(members.begin(), members.end());
    int new_rank = 0;
    while (members[size_t(new_rank)].second != rank_) ++new_rank;
    auto prefix = "split" + std::to_string(splits_++) + "/" + std::to_string(color);
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    return std::make_shared<GlooCommunicator>(store, new_rank, int(members.size()), timeout_);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  int rank_, size_;
  std::chrono::seconds timeout_;
  int splits_ = 0;
};

}  // namespace

std::shared_ptr<Communicator> make_gloo_world_communicator(const LaunchInfo& launch,
                                                           std::chrono::seconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = uint16_t(launch.master_port);
  options.isServer = launch.rank == 0 && !launch.agent_store;
  options.numWorkers = size_t(launch.world_size);
  options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, options);
  } catch (const std::exception& e) {
    fail("cannot reach the TCPStore at MASTER_ADDR=", launch.master_addr,
         " MASTER_PORT=", launch.master_port, ": ", e.what());
  }
  return std::make_shared<GlooCommunicator>(store, int(launch.rank), int(launch.world_size), timeout);
}

}  // namespace trident
