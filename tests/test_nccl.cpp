// NCCL on a real GPU: skipped (and reported so) on machines without one.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "parallel/comm.h"
#include "parallel/launch.h"

using namespace trident;

TEST(Nccl, CollectivesOnOneGpu) {
#ifndef TRIDENT_WITH_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  CommOptions options;
  options.backend = "nccl";
  options.device = torch::Device(torch::kCUDA, 0);
  auto comm = make_world_communicator(LaunchInfo{}, options);
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
  }
  comm->barrier();
  auto child = comm->split(0, 0);
  EXPECT_EQ(child->size(), 1);
#endif
}
