// Gloo backend through LibTorch's c10d: CPU tensors, env:// launch (TCPStore at
// MASTER_ADDR:MASTER_PORT, rank 0 serving it unless torchrun's agent does).
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "parallel/comm/backends.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/network_route.h"
#include "parallel/comm/watchdog.h"

namespace trident {
namespace {

c10d::ReduceOp gloo_op(ReduceOp op) {
  return op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
}

// Collectives that only move data see bf16 as fp16, which Gloo handles: same bits, no arithmetic.
torch::Tensor movable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kHalf) : t;
}

// Completes a Gloo operation; a failure names the call and what it means for the job.
template <typename WorkPtr>
void wait(const WorkPtr& work, const std::string& call, std::chrono::seconds timeout) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string cause = describe(e);
    // Gloo says "Timed out ..." on the call that waited, and "Application timeout caused pair
    // closure" on a call whose connection another call's timeout closed (ZeRO-3's prefetch).
    if (cause.find("Timed out") != std::string::npos || cause.find("timeout caused pair closure") != std::string::npos)
      fail(call, ": no answer from a peer within parallel.timeout_s=", timeout.count(),
           " s: it is stopped, stuck or lost (gloo: ", cause, ")");
    if (cause.find("Connection") != std::string::npos)
      fail(call, ": a peer closed its connection: it failed or exited, and its own error, if any, ",
           "is printed above (gloo: ", cause, ")");
    fail(call, " failed: ", cause);
  }
}

template <typename WorkPtr>
class GlooPendingAllReduce : public WidenedReduction {
 public:
  GlooPendingAllReduce(const torch::Tensor& target, ReduceOp op, int size, std::string call,
                       std::chrono::seconds timeout)
      : WidenedReduction(target, op, size), call_(std::move(call)), timeout_(timeout) {}
  void start(WorkPtr work) { work_ = std::move(work); }

 private:
  void wait_for_transfer() override { trident::wait(work_, call_, timeout_); }
  WorkPtr work_;
  std::string call_;
  std::chrono::seconds timeout_;
};

// Sends, receives or an all-gather in flight (c10d keeps their tensors alive).
template <typename Work>
struct GlooPendingWorks : PendingCollective {
  GlooPendingWorks(std::string call, std::chrono::seconds timeout) : call(std::move(call)), timeout(timeout) {}
  void wait() override {
    for (auto& work : works) trident::wait(work, call, timeout);
  }
  std::vector<Work> works;
  std::string call;
  std::chrono::seconds timeout;
};

class GlooCommunicator : public Communicator {
 public:
  // Connects this rank to every other through `interface` (Gloo's full mesh), within
  // `connect_within`: a peer that never answers ends this process then (the watchdog), since
  // Gloo's own connect retries would wait several timeouts.
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::seconds timeout,
                   LocalInterface interface, std::chrono::seconds connect_within)
      : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout), interface_(std::move(interface)) {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices.push_back(std::getenv("GLOO_SOCKET_IFNAME")
                                   ? c10d::ProcessGroupGloo::createDeviceForInterface(interface_.name)
                                   : c10d::ProcessGroupGloo::createDeviceForHostname(interface_.address));
    const std::string what = str("gloo: rank ", rank, " of ", size, " connecting to its peers from interface ",
                                 interface_.name, " (", interface_.address, ")");
    try {
      CallWatch watch(what, connect_within);
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, size, options);
    } catch (const std::exception& e) {
      fail(what, " failed: ", describe(e),
           " (a peer advertised an address this host cannot reach: check that every host routes to "
           "MASTER_ADDR through the network they share, or set GLOO_SOCKET_IFNAME on each)");
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override { all_reduce_async(tensor, op)->wait(); }

  std::unique_ptr<PendingCollective> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override {
    require_contiguous(tensor, "all_reduce");
    using Work = decltype(group_->barrier());
    auto pending = std::make_unique<GlooPendingAllReduce<Work>>(tensor, op, size_,
                                                                describe_call("all_reduce"), timeout_);
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

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override { all_gather_async(out, in)->wait(); }

  std::unique_ptr<PendingCollective> all_gather_async(torch::Tensor& out, const torch::Tensor& in) override {
    require_chunks(out, in, size_, "all_gather");
    torch::Tensor flat_out = movable(out).view(-1);
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(flat_out.narrow(0, r * in.numel(), in.numel()));
    std::vector<torch::Tensor> inputs = {movable(in).view(-1)};
    using Work = decltype(group_->barrier());
    auto pending = std::make_unique<GlooPendingWorks<Work>>(describe_call("all_gather"), timeout_);
    pending->works.push_back(group_->allgather(outputs, inputs));
    return pending;
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    require_contiguous(tensor, "broadcast");
    std::vector<torch::Tensor> tensors = {movable(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    wait(group_->broadcast(tensors, options), describe_call("broadcast"), timeout_);
  }

  void send(const torch::Tensor& tensor, int peer) override {
    require_contiguous(tensor, "send");
    std::vector<torch::Tensor> tensors = {movable(tensor)};
    wait(group_->send(tensors, peer, 0), describe_call("send"), timeout_);
  }

  void recv(torch::Tensor& tensor, int peer) override {
    require_contiguous(tensor, "recv");
    std::vector<torch::Tensor> tensors = {movable(tensor)};
    wait(group_->recv(tensors, peer, 0), describe_call("recv"), timeout_);
  }

  void exchange(std::vector<Transfer>& transfers) override { exchange_async(transfers, "exchange")->wait(); }

  std::unique_ptr<PendingCollective> exchange_async(std::vector<Transfer> transfers, const char* operation) override {
    using Work = decltype(group_->barrier());
    auto pending = std::make_unique<GlooPendingWorks<Work>>(describe_call(operation), timeout_);
    for (auto& t : transfers) {
      require_contiguous(t.tensor, operation);
      std::vector<torch::Tensor> tensors = {movable(t.tensor)};
      pending->works.push_back(t.send ? group_->send(tensors, t.peer, 0) : group_->recv(tensors, t.peer, 0));
    }
    return pending;
  }

  void barrier() override { wait(group_->barrier(), describe_call("barrier"), timeout_); }

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
    auto group = std::make_shared<GlooCommunicator>(store, new_rank, int(members.size()), timeout_, interface_, timeout_);
    group->set_name("split");
    return group;
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  int rank_, size_;
  std::chrono::seconds timeout_;
  LocalInterface interface_;
  int splits_ = 0;
};

// The interface Gloo binds to: GLOO_SOCKET_IFNAME's, else the one routing to MASTER_ADDR. A job
// across hosts cannot bind to loopback: its peers would be told to connect to their own host.
LocalInterface gloo_interface(const LaunchInfo& launch) {
  const char* chosen = std::getenv("GLOO_SOCKET_IFNAME");
  LocalInterface interface = chosen && *chosen
                                 ? interface_named(chosen, "GLOO_SOCKET_IFNAME")
                                 : interface_toward(launch.master_addr, int(launch.master_port), "MASTER_ADDR");
  if (interface.loopback && launch.world_size > launch.local_world_size)
    fail("gloo: rank ", launch.rank, " would connect to its peers from the loopback interface ", interface.name,
         " (", interface.address, chosen && *chosen ? ", GLOO_SOCKET_IFNAME" : ", the route to MASTER_ADDR=",
         chosen && *chosen ? "" : launch.master_addr, "), but the job spans hosts (WORLD_SIZE=", launch.world_size,
         ", LOCAL_WORLD_SIZE=", launch.local_world_size, "): set MASTER_ADDR to rank 0's address on the network ",
         "the hosts share (not a name this host resolves to 127.x, as Debian's /etc/hosts does), or ",
         "GLOO_SOCKET_IFNAME to that network's interface");
  return interface;
}

}  // namespace

std::shared_ptr<Communicator> make_gloo_world_communicator(const LaunchInfo& launch,
                                                           std::chrono::seconds timeout) {
  // Store, arrival of every process and the mesh's connections share one deadline.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  const std::string store_at = str("the TCPStore at MASTER_ADDR=", launch.master_addr,
                                   " MASTER_PORT=", launch.master_port);
  const std::string within = str(" within parallel.timeout_s=", timeout.count(), " s");
  const LocalInterface interface = gloo_interface(launch);
  FlightRecorder::process().set_address(interface.address);
  ignore_broken_pipes();  // a peer that exits must make this rank fail with a cause, not vanish
  // c10d logs every connection retry and timeout through glog (or its own logger) before
  // throwing the exception that says the same, which trident reports once.
  log::QuietStderr quiet;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions options;
    options.port = uint16_t(launch.master_port);
    options.isServer = launch.rank == 0 && !launch.agent_store;
    options.timeout = timeout;  // also each later wait on the store (a split's connections)
    auto tcp = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, options);
    // torchrun's agent store outlives restarts: each attempt keeps its keys apart, as
    // torch.distributed does.
    store = tcp;
    if (launch.agent_store)
      store = c10::make_intrusive<c10d::PrefixStore>(str("/worker/attempt_", launch.restart_count), tcp);
  } catch (const std::exception& e) {
    if (launch.rank == 0 && !launch.agent_store) fail("cannot serve ", store_at, ": ", describe(e));
    fail("cannot reach ", store_at, within, ": ", describe(e));
  }
  try {
    const std::string key = "trident/arrived";
    for (int64_t arrived = store->add(key, 1); arrived < launch.world_size; arrived = store->add(key, 0)) {
      if (Clock::now() > deadline)
        fail("only ", arrived, " of ", launch.world_size, " processes reached ", store_at, within,
             " (one failed to start, or they were given different MASTER_ADDR/MASTER_PORT)");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const c10::Error& e) {
    fail("lost ", store_at, " while the processes gathered: ", describe(e));
  }
  // What is left of the deadline, at least a second: the mesh connects within the same deadline.
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()) + std::chrono::seconds(1);
  return std::make_shared<GlooCommunicator>(store, int(launch.rank), int(launch.world_size), timeout, interface,
                                            std::max(left, std::chrono::seconds(1)));
}

}  // namespace trident
