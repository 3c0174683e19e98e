// NCCL on a real GPU: skipped (and reported so) on machines without one.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "parallel/comm/communicator.h"
#include "parallel/comm/launch.h"

using namespace trident;

namespace {

// Why these tests cannot run here; "" where they can.
std::string without_nccl() {
#ifndef TRIDENT_WITH_NCCL
  return "built without NCCL";
#else
  return torch::cuda::is_available() ? "" : "no CUDA device";
#endif
}

// NCCL over this process alone, on GPU 0.
std::shared_ptr<Communicator> nccl_world_of_one() {
  CommOptions options;
  options.backend = Backend::nccl;
  options.device = torch::Device(torch::kCUDA, 0);
  return make_world_communicator(LaunchInfo{}, options);
}

}  // namespace

TEST(Nccl, CollectivesOnOneGpu) {
  if (const std::string why = without_nccl(); !why.empty()) GTEST_SKIP() << why;
  auto comm = nccl_world_of_one();
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble}) {
    auto t = torch::full({1000}, 3.0, cuda.dtype(dtype));
    comm->all_reduce(t, ReduceOp::avg);
    EXPECT_TRUE(torch::equal(t.cpu(), torch::full({1000}, 3.0, torch::TensorOptions().dtype(dtype))));
    auto out = torch::empty({1000}, cuda.dtype(dtype));
    comm->all_gather(out, t);
    comm->reduce_scatter(out, t, ReduceOp::sum);
    EXPECT_TRUE(torch::equal(out.cpu(), t.cpu()));
    auto rows = torch::arange(12, cuda.dtype(dtype)).view({4, 3}), moved = torch::empty_like(rows);
    comm->all_to_all(moved, rows);
    EXPECT_TRUE(torch::equal(moved.cpu(), rows.cpu()));
  }
  comm->barrier();
  auto child = comm->split(0, 0);
  EXPECT_EQ(child->size(), 1);
}

// The communication stream's ordering with the compute stream, at world size 1: an operation
// sees what the compute stream queued before it, the compute stream after wait() sees its
// result, and memory the caller dropped stays the operation's until it completes.
TEST(Nccl, AsyncOperationsAreOrderedWithTheComputeStream) {
  if (const std::string why = without_nccl(); !why.empty()) GTEST_SKIP() << why;
  auto comm = nccl_world_of_one();
  auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  const int64_t n = 1 << 24;
  for (int round = 0; round < 20; ++round) {
    // A long computation, then a reduction of its output issued at once.
    auto x = torch::ones({n}, cuda);
    for (int i = 0; i < 10; ++i) x = x * 2 - 1 + 1;  // ends at 1024 after ten kernels of 64 MiB
    auto pending = comm->all_reduce_async(x, ReduceOp::sum);
    pending->wait();
    auto y = x + 1;
    EXPECT_EQ(y.min().item<float>(), 1025.0f);

    // The gather's input dropped before the gather completes: its memory must not be reused.
    auto out = torch::empty({n}, cuda);
    std::unique_ptr<PendingCollective> gather;
    {
      auto in = torch::full({n}, 7.0, cuda);
      gather = comm->all_gather_async(out, in);
    }
    auto reuse = torch::full({n}, -1.0, cuda);  // the allocator's first candidate: in's block
    gather->wait();
    EXPECT_EQ(out.min().item<float>(), 7.0f);
    EXPECT_EQ(out.max().item<float>(), 7.0f);

    // A pipeline exchange with itself, posted early and waited for later.
    auto sent = torch::full({1000}, float(round), cuda), received = torch::empty({1000}, cuda);
    auto exchange = comm->exchange_async({{sent, 0, true}, {received, 0, false}}, "exchange");
    exchange->wait();
    EXPECT_TRUE(torch::equal(received, sent));
  }
  comm->barrier();
}
