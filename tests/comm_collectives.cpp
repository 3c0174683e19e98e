// Every collective of the world communicator, run by each process of a multi-process job
// (under mpirun for MPI, under tests/launch_env.sh for Gloo). Launched by CTest with 2, 3, 4.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>

#include "core/layout.h"
#include "core/text.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/process_groups.h"
#include "parallel/data_parallel.h"
#include "parallel/linear_multiply.h"
#include "tests/helpers.h"
#include "tests/multiprocess.h"

using namespace trident;
using trident::testing::error_of;

namespace {

Communicator& comm() { return trident::testing::world(); }

int n() { return comm().size(); }
int me() { return comm().rank(); }

const std::vector<torch::Dtype> kDtypes = {torch::kFloat, torch::kDouble, torch::kBFloat16,
                                           torch::kHalf};

// Small integers are exact in every dtype, so results compare with equality.
torch::Tensor filled(int64_t count, double value, torch::Dtype dtype) {
  return torch::full({count}, value, torch::TensorOptions().dtype(dtype));
}

}  // namespace

TEST(Collectives, AllReduceSumAvgMax) {
  for (auto dtype : kDtypes) {
    auto sum = filled(1000, me() + 1, dtype);
    comm().all_reduce(sum, ReduceOp::sum);
    EXPECT_TRUE(torch::equal(sum, filled(1000, n() * (n() + 1) / 2, dtype))) << dtype;
    auto avg = filled(7, 2 * (me() + 1), dtype);
    comm().all_reduce(avg, ReduceOp::avg);
    EXPECT_TRUE(torch::equal(avg, filled(7, n() + 1, dtype))) << dtype;
    auto max = filled(3, me(), dtype);
    comm().all_reduce(max, ReduceOp::max);
    EXPECT_TRUE(torch::equal(max, filled(3, n() - 1, dtype))) << dtype;
  }
}

TEST(Collectives, AsyncAllReduceCompletesOnWait) {
  for (auto dtype : kDtypes) {
    auto a = filled(4096, me() + 1, dtype), b = filled(5, 1, dtype);
    auto first = comm().all_reduce_async(a, ReduceOp::sum);
    auto second = comm().all_reduce_async(b, ReduceOp::avg);
    first->wait();
    second->wait();
    EXPECT_TRUE(torch::equal(a, filled(4096, n() * (n() + 1) / 2, dtype))) << dtype;
    EXPECT_TRUE(torch::equal(b, filled(5, 1, dtype))) << dtype;
  }
}

TEST(Collectives, ReduceScatterKeepsThisRanksChunk) {
  const int64_t chunk = 6;
  for (auto dtype : kDtypes) {
    // Chunk c of rank r holds (r + 1) * (c + 1): the sum of chunk c is (c + 1) * n(n+1)/2.
    auto in = torch::arange(n(), torch::kDouble).add(1).repeat_interleave(chunk).mul(me() + 1).to(dtype);
    auto out = torch::empty({chunk}, torch::TensorOptions().dtype(dtype));
    comm().reduce_scatter(out, in, ReduceOp::sum);
    EXPECT_TRUE(torch::equal(out, filled(chunk, (me() + 1) * n() * (n() + 1) / 2, dtype))) << dtype;
  }
}

TEST(Collectives, AllGatherInRankOrder) {
  for (auto dtype : kDtypes) {
    auto in = filled(5, me(), dtype);
    auto out = torch::empty({5 * n()}, torch::TensorOptions().dtype(dtype));
    comm().all_gather(out, in);
    auto expected = torch::arange(n(), torch::kDouble).repeat_interleave(5).to(dtype);
    EXPECT_TRUE(torch::equal(out, expected)) << dtype;
  }
}

// Two gathers in flight at once (ZeRO-3's prefetch beside the gather it waits for), each
// complete once waited for.
TEST(Collectives, AsyncAllGathersCompleteOnWait) {
  for (auto dtype : kDtypes) {
    auto in_a = filled(1000, me(), dtype), in_b = filled(3, me() + 1, dtype);
    auto out_a = torch::empty({1000 * n()}, in_a.options()), out_b = torch::empty({3 * n()}, in_b.options());
    auto first = comm().all_gather_async(out_a, in_a);
    auto second = comm().all_gather_async(out_b, in_b);
    second->wait();
    first->wait();
    EXPECT_TRUE(torch::equal(out_a, torch::arange(n(), torch::kDouble).repeat_interleave(1000).to(dtype))) << dtype;
    EXPECT_TRUE(torch::equal(out_b, torch::arange(1, n() + 1, torch::kDouble).repeat_interleave(3).to(dtype))) << dtype;
  }
}

TEST(Collectives, BroadcastFromTheLastRank) {
  for (auto dtype : kDtypes) {
    auto t = filled(9, me() == n() - 1 ? 42 : -1, dtype);
    comm().broadcast(t, n() - 1);
    EXPECT_TRUE(torch::equal(t, filled(9, 42, dtype))) << dtype;
  }
}

TEST(Collectives, SendAndReceiveAroundARing) {
  const int next = (me() + 1) % n(), previous = (me() + n() - 1) % n();
  for (auto dtype : kDtypes) {
    auto out = filled(11, me(), dtype), in = filled(11, -1, dtype);
    // Even ranks send first, odd ranks receive first: no cycle of blocked sends.
    if (me() % 2 == 0) {
      comm().send(out, next);
      comm().recv(in, previous);
    } else {
      comm().recv(in, previous);
      comm().send(out, next);
    }
    EXPECT_TRUE(torch::equal(in, filled(11, previous, dtype))) << dtype;
  }
  comm().barrier();
}

TEST(Collectives, ExchangeWithBothNeighboursAtOnce) {
  // Large enough that a blocking send would wait for its receiver (MPI rendezvous).
  const int next = (me() + 1) % n(), previous = (me() + n() - 1) % n();
  const int64_t count = 1 << 20;
  auto to_next = filled(count, me(), torch::kFloat), to_previous = filled(count, -me(), torch::kFloat);
  auto from_previous = filled(count, 0, torch::kFloat), from_next = filled(count, 0, torch::kFloat);
  std::vector<Communicator::Transfer> transfers = {
      {to_next, next, true}, {to_previous, previous, true},
      {from_previous, previous, false}, {from_next, next, false}};
  comm().exchange(transfers);
  EXPECT_TRUE(torch::equal(from_previous, filled(count, previous, torch::kFloat)));
  EXPECT_TRUE(torch::equal(from_next, filled(count, -next, torch::kFloat)));
}

// Row j of rank `from`'s part for rank `to`: one value that names all three, exact in bf16 (< 256).
double all_to_all_value(int from, int to, int64_t row) { return 16 * from + 4 * to + double(row); }

TEST(Collectives, AllToAllInEqualParts) {
  const int64_t rows = 3, width = 5;
  for (auto dtype : kDtypes) {
    auto in = torch::empty({n() * rows, width}, torch::TensorOptions().dtype(dtype));
    auto expected = torch::empty_like(in);
    for (int r = 0; r < n(); ++r)
      for (int64_t j = 0; j < rows; ++j) {
        in[r * rows + j].fill_(all_to_all_value(me(), r, j));
        expected[r * rows + j].fill_(all_to_all_value(r, me(), j));
      }
    auto out = torch::full_like(in, -1);
    comm().all_to_all(out, in);
    EXPECT_TRUE(torch::equal(out, expected)) << dtype;
  }
}

TEST(Collectives, AllToAllInUnequalPartsSomeEmpty) {
  // Rank `from` sends (from + 2 * to) % 3 rows to rank `to`: parts of 0, 1 and 2 rows, a
  // different number each way between most pairs.
  auto rows = [](int from, int to) { return int64_t((from + 2 * to) % 3); };
  std::vector<int64_t> in_splits, out_splits;
  for (int r = 0; r < n(); ++r) {
    in_splits.push_back(rows(me(), r));
    out_splits.push_back(rows(r, me()));
  }
  auto total = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); };
  for (auto dtype : kDtypes) {
    auto in = torch::empty({total(in_splits), 2, 3}, torch::TensorOptions().dtype(dtype));
    auto expected = torch::empty({total(out_splits), 2, 3}, in.options());
    for (int r = 0, sent = 0, received = 0; r < n(); ++r) {
      for (int64_t j = 0; j < rows(me(), r); ++j) in[sent++].fill_(all_to_all_value(me(), r, j));
      for (int64_t j = 0; j < rows(r, me()); ++j) expected[received++].fill_(all_to_all_value(r, me(), j));
    }
    auto out = torch::full_like(expected, -1);
    comm().all_to_all(out, in, out_splits, in_splits);
    EXPECT_TRUE(torch::equal(out, expected)) << dtype;
  }
}

// Checked on every rank alike before anything is sent, so every rank fails and none waits.
TEST(Collectives, AllToAllRefusesPartsThatDoNotAddUp) {
  auto in = torch::zeros({n() * 2, 4}), out = torch::zeros({n() * 2, 4});
  auto refused = [&](std::string expected, auto&& call) {
    const std::string message = error_of(call);
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  };
  auto odd = torch::zeros({n() * 2 + 1, 4});
  refused(str("the input's ", n() * 2 + 1, " rows do not cut into ", n(), " equal parts"),
          [&] { comm().all_to_all(out, odd); });
  std::vector<int64_t> one_each(size_t(n()), 1);
  refused(str("the input's splits add up to ", n(), " rows, but it has ", n() * 2),
          [&] { comm().all_to_all(out, in, {}, one_each); });
  refused(str("1 splits of the output for a group of ", n(), " ranks"), [&] { comm().all_to_all(out, in, {1}, {}); });
  auto wider = torch::zeros({n() * 2, 5});
  refused("of the same shape and dtype", [&] { comm().all_to_all(wider, in); });
  comm().barrier();
}

TEST(Collectives, SplitGroupsByColorOrderedByKey) {
  auto group = comm().split(me() % 2, -me());  // descending rank order inside each parity
  int members = 0, rank_in_group = 0;
  for (int r = 0; r < n(); ++r) {
    if (r % 2 != me() % 2) continue;
    ++members;
    if (r > me()) ++rank_in_group;
  }
  EXPECT_EQ(group->size(), members);
  EXPECT_EQ(group->rank(), rank_in_group);
  auto sum = torch::full({1}, double(me()), torch::kDouble);
  group->all_reduce(sum, ReduceOp::sum);
  double expected = 0;
  for (int r = me() % 2; r < n(); r += 2) expected += r;
  EXPECT_EQ(sum.item<double>(), expected);
}

TEST(ProcessGroups, TensorAndDataGroupsReduceTheRightRanks) {
  if (n() % 2 != 0) GTEST_SKIP() << "needs an even world";
  Layout layout;
  layout.tp_size = 2;
  layout.dp_size = n() / 2;
  ProcessGroups groups(trident::testing::world_shared(), layout);
  EXPECT_EQ(groups.tp_group().size(), 2);
  EXPECT_EQ(groups.tp_group().rank(), me() % 2);
  EXPECT_EQ(groups.dp_group().size(), n() / 2);
  EXPECT_EQ(groups.dp_group().rank(), me() / 2);
  auto t = torch::full({1}, double(me()), torch::kDouble);
  groups.tp_group().all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(t.item<double>(), double(me() / 2 * 4 + 1));  // ranks 2k and 2k+1
}

// A new kind of parallelism asks for its groups from a view of the grid: here the data-parallel
// ranks of TP 1 seen as expert-parallel pairs x expert-data-parallel copies (np 4: ep {0,1}
// {2,3}, edp {0,2} {1,3}).
TEST(ProcessGroups, AViewOfTheGridSplitsItsOwnGroups) {
  if (n() != 4) GTEST_SKIP() << "needs four ranks";
  Layout layout;
  layout.dp_size = 4;
  ProcessGroups groups(trident::testing::world_shared(), layout);
  const ProcessGrid experts = layout.grid().view({"tp", "cp", "dp"}, {{"ep", 2}, {"edp", 2}});
  auto ep = groups.split(experts, {"ep"}, "expert-parallel");
  auto edp = groups.split(experts, {"edp"}, "expert-data-parallel");
  EXPECT_EQ(ep->rank(), me() % 2);
  EXPECT_EQ(edp->rank(), me() / 2);
  auto t = torch::full({1}, double(me()), torch::kDouble);
  ep->all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(t.item<double>(), double(me() / 2 * 4 + 1));  // ranks 2k and 2k+1
  t.fill_(double(me()));
  edp->all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(t.item<double>(), double(me() % 2 * 2 + 2));  // ranks k and k+2
}

// The gradients of `params` over the world at ZeRO `stage`, in fp32 buckets of 400 elements.
std::unique_ptr<DataParallelGrads> world_grads(const std::vector<torch::Tensor>& params, int64_t stage) {
  GradBufferOptions options;
  options.zero = ZeroSharding{stage, n()};
  return std::make_unique<DataParallelGrads>(params, make_grad_buckets(params, 4 * 400, torch::kFloat, options.zero),
                                             trident::testing::world(), options);
}

// bf16 weights whose linear multiplies add their gradients into the fp32 buffer (gradient-
// accumulation fusion, parallel/linear_multiply.h) are reduced like the rest: each bucket as soon
// as the hooks say its gradients are in, during the last backward, to the exact means.
TEST(DataParallelGrads, FusedWeightGradientsAverageAtEveryZeroStage) {
  for (int64_t stage : {0, 1, 2}) {
    SCOPED_TRACE(stage);
    auto a = torch::zeros({30, 10}, torch::dtype(torch::kBFloat16).requires_grad(true));
    auto b = torch::zeros({50, 10}, torch::dtype(torch::kBFloat16).requires_grad(true));
    auto c = torch::zeros({70}, torch::dtype(torch::kBFloat16).requires_grad(true));
    const auto owned = world_grads({a, b, c}, stage);
    DataParallelGrads& grads = *owned;
    ASSERT_EQ(grads.num_buckets(), 2u);
    const FlatBuckets& flat = grads.flat();
    // Tensor hooks get the gradients that reach .grad: c's, not the fused weights' (undefined).
    int seen = 0;
    for (auto* weight : {&a, &b}) weight->register_hook([&](const torch::Tensor& g) { seen += g.defined(); });
    grads.zero();
    for (int micro = 0; micro < 2; ++micro) {
      if (micro == 1) grads.arm();
      // 4 rows of (r + 1) (and 2 (r + 1)) against a gradient of ones: every element of a's
      // gradient is 4 (r + 1), of b's 8 (r + 1); c's is 3 (r + 1).
      const auto rows = torch::full({4, 10}, double(me() + 1), torch::kBFloat16);
      auto loss = multiply_rows(rows, a, {}).sum() + multiply_rows(2 * rows, b, {}).sum() + (c * 3 * (me() + 1)).sum();
      loss.backward();
    }
    EXPECT_EQ(seen, 0);
    grads.finish();
    if (stage < 2) EXPECT_EQ(grads.started_during_backward(), 2u);
    const double mean = (n() + 1) / 2.0 * 2;  // two micro-batches
    auto expected = torch::zeros({flat.total});
    expected.narrow(0, flat.offset[0], 300).fill_(4 * mean);
    expected.narrow(0, flat.offset[1], 500).fill_(8 * mean);
    expected.narrow(0, flat.offset[2], 70).fill_(3 * mean);
    const int64_t rank = stage == 0 ? 0 : me();
    for (size_t k = 0; k < grads.num_buckets(); ++k)
      EXPECT_TRUE(torch::equal(grads.reduced(k), expected.narrow(0, flat.slice_start(k, rank), flat.slice_numel(k))));
  }
}

// Every ZeRO stage reduces the same means; stages 1 and 2 leave each rank its slices only.
TEST(DataParallelGrads, BucketsAverageOverlappedWithBackwardAtEveryZeroStage) {
  for (int64_t stage : {0, 1, 2}) {
    SCOPED_TRACE(stage);
    auto a = torch::zeros({300}, torch::requires_grad()), b = torch::zeros({500}, torch::requires_grad()),
         c = torch::zeros({70}, torch::requires_grad());
    const auto owned = world_grads({a, b, c}, stage);
    DataParallelGrads& grads = *owned;
    // Reverse order: c (70) and b (500) fill the first 400-element bucket, a the second.
    ASSERT_EQ(grads.num_buckets(), 2u);
    const FlatBuckets& flat = grads.flat();
    for (int step = 0; step < 2; ++step) {
      grads.zero();
      for (int micro = 0; micro < 2; ++micro) {
        if (micro == 1) grads.arm();
        auto loss = (a * (me() + 1)).sum() + (b * 2 * (me() + 1)).sum() + (c * 3 * (me() + 1)).sum();
        loss.backward();
      }
      grads.finish();
      if (stage < 2) EXPECT_EQ(grads.started_during_backward(), 2u);
      const double mean = (n() + 1) / 2.0 * 2;  // two micro-batches
      auto expected = torch::zeros({flat.total});
      // a, b, c were given as parameters 0, 1, 2 with factors 1, 2, 3.
      expected.narrow(0, flat.offset[0], 300).fill_(mean);
      expected.narrow(0, flat.offset[1], 500).fill_(2 * mean);
      expected.narrow(0, flat.offset[2], 70).fill_(3 * mean);
      const int64_t rank = stage == 0 ? 0 : me();
      for (size_t k = 0; k < grads.num_buckets(); ++k)
        EXPECT_TRUE(torch::allclose(grads.reduced(k),
                                    expected.narrow(0, flat.slice_start(k, rank), flat.slice_numel(k))));
    }
    const int64_t shards = stage == 0 ? 1 : n();
    EXPECT_EQ(flat.total % shards, 0);
    const int64_t held = stage == 0 ? flat.total : stage == 1 ? flat.total + flat.total / shards
                                                                : flat.total / shards;
    EXPECT_EQ(grads.bytes(), 4 * held);
  }
}

