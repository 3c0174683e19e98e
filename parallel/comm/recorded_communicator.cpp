#include "parallel/comm/recorded_communicator.h"

#include "core/error.h"
#include "core/text.h"
#include "core/timer.h"
#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/trace_span.h"

namespace trident {
namespace {


// Runs `body`, a part of recorded operation `id`; an Error from it gets the flight recorder's
// explanation of who was behind.
template <typename Body>
void explained(int64_t id, Body&& body) {
  try {
    body();
  } catch (const JobError&) {
    throw;
  } catch (const Error& e) {
    const std::string behind = FlightRecorder::process().explain_failure(FlightRecorder::kPeersWait, id);
    if (behind.empty()) throw;
    throw Error(str(e.what(), "; ", behind));
  }
}

// Runs `body`, the wait that completes operation `id`, and records its end and the time waited.
template <typename Body>
void waited(int64_t id, Body&& body) {
  const Stopwatch waiting;
  explained(id, body);
  FlightRecorder::process().finished(id, waiting.elapsed_s());
}

class RecordedPending : public PendingCollective {
 public:
  RecordedPending(std::unique_ptr<PendingCollective> inner, int64_t id) : inner_(std::move(inner)), id_(id) {}
  void wait() override { waited(id_, [&] { inner_->wait(); }); }

 private:
  std::unique_ptr<PendingCollective> inner_;
  int64_t id_;
};

int64_t bytes_of(const torch::Tensor& t) { return int64_t(t.numel() * t.element_size()); }

class RecordedCommunicator : public Communicator {
 public:
  RecordedCommunicator(std::shared_ptr<Communicator> inner, std::vector<int> world_ranks)
      : inner_(std::move(inner)), world_ranks_(std::move(world_ranks)), index_(created_++) {
    TRIDENT_CHECK(int(world_ranks_.size()) == inner_->size(), world_ranks_.size(), " world ranks for a group of ",
                  inner_->size());
    set_name(inner_->name());
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  torch::Device device() const override { return inner_->device(); }
  void set_name(std::string name) override {
    inner_->set_name(name);
    Communicator::set_name(name);
    std::vector<std::string> ranks;
    for (int r : world_ranks_) ranks.push_back(std::to_string(r));
    key_ = str("g", index_, ":", name, "[", join(ranks, ","), "]");
  }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override {
    run("all_reduce", bytes_of(tensor), [&] { inner_->all_reduce(tensor, op); });
  }
  std::unique_ptr<PendingCollective> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override {
    return started("all_reduce", bytes_of(tensor), [&] { return inner_->all_reduce_async(tensor, op); });
  }
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    run("reduce_scatter", bytes_of(in), [&] { inner_->reduce_scatter(out, in, op); });
  }
  std::unique_ptr<PendingCollective> reduce_scatter_async(torch::Tensor& out, const torch::Tensor& in,
                                                          ReduceOp op) override {
    return started("reduce_scatter", bytes_of(in), [&] { return inner_->reduce_scatter_async(out, in, op); });
  }
  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    run("all_gather", bytes_of(out), [&] { inner_->all_gather(out, in); });
  }
  std::unique_ptr<PendingCollective> all_gather_async(torch::Tensor& out, const torch::Tensor& in) override {
    return started("all_gather", bytes_of(out), [&] { return inner_->all_gather_async(out, in); });
  }
  void broadcast(torch::Tensor& tensor, int root) override {
    run("broadcast", bytes_of(tensor), [&] { inner_->broadcast(tensor, root); });
  }
  void send(const torch::Tensor& tensor, int peer) override {
    run("send", bytes_of(tensor), [&] { inner_->send(tensor, peer); });
  }
  void recv(torch::Tensor& tensor, int peer) override {
    run("recv", bytes_of(tensor), [&] { inner_->recv(tensor, peer); });
  }
  void exchange(std::vector<Transfer>& transfers) override {
    run("exchange", transfer_bytes(transfers), [&] { inner_->exchange(transfers); });
  }
  std::unique_ptr<PendingCollective> exchange_async(std::vector<Transfer> transfers, const char* operation) override {
    const int64_t bytes = transfer_bytes(transfers);
    return started(operation, bytes, [&] { return inner_->exchange_async(std::move(transfers), operation); });
  }
  void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                  const std::vector<int64_t>& in_splits) override {
    run("all_to_all", bytes_of(in), [&] { inner_->all_to_all(out, in, out_splits, in_splits); });
  }
  void barrier() override {
    run("barrier", 0, [&] { inner_->barrier(); });
  }
  std::shared_ptr<Communicator> split(int color, int key) override {
    std::shared_ptr<Communicator> group;
    run("split", 0, [&] { group = inner_->split(color, key); });
    // The new group's members' world ranks: every member tells its own (on the group's device:
    // NCCL moves GPU tensors only).
    const auto on = torch::TensorOptions().dtype(torch::kLong).device(group->device());
    auto mine = torch::full({1}, int64_t(world_ranks_[size_t(rank())]), on);
    auto all = torch::empty({group->size()}, on);
    group->all_gather(all, mine);
    const auto gathered = all.cpu();
    std::vector<int> ranks(size_t(group->size()));
    for (int r = 0; r < group->size(); ++r) ranks[size_t(r)] = int(gathered[r].item<int64_t>());
    return recorded(group, ranks);
  }

 private:
  static int64_t transfer_bytes(const std::vector<Transfer>& transfers) {
    int64_t bytes = 0;
    for (const auto& t : transfers) bytes += bytes_of(t.tensor);
    return bytes;
  }
  // Each operation, and the start of an asynchronous one, is a span of the profiler's trace:
  // "all_reduce tensor-parallel 4.0 MiB".
  template <typename Body>
  void run(const char* operation, int64_t bytes, Body&& body) {
    TRIDENT_TRACE_SPAN(operation, " ", name(), " ", binary_bytes(double(bytes)));
    waited(FlightRecorder::process().started(key_, ++sequence_, operation, bytes), body);
  }
  template <typename Start>
  std::unique_ptr<PendingCollective> started(const char* operation, int64_t bytes, Start&& start) {
    TRIDENT_TRACE_SPAN(operation, " (start) ", name(), " ", binary_bytes(double(bytes)));
    const int64_t id = FlightRecorder::process().started(key_, ++sequence_, operation, bytes);
    std::unique_ptr<PendingCollective> pending;
    explained(id, [&] { pending = start(); });  // in flight until its wait
    return std::make_unique<RecordedPending>(std::move(pending), id);
  }

  std::shared_ptr<Communicator> inner_;
  std::vector<int> world_ranks_;
  // Which recorded communicator of this process this is: every rank creates its groups in the
  // same order, so the index tells apart groups of the same name and members (the CPU world
  // and NCCL's) and means the same group on every rank.
  int index_;
  static int created_;
  std::string key_;
  int64_t sequence_ = 0;
};
int RecordedCommunicator::created_ = 0;

}  // namespace

std::shared_ptr<Communicator> recorded(std::shared_ptr<Communicator> inner, std::vector<int> world_ranks) {
  return std::make_shared<RecordedCommunicator>(std::move(inner), std::move(world_ranks));
}

}  // namespace trident
