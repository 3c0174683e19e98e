// Ring attention over the whole job as one context-parallel group (2, 3 or 4 ranks) against
// plain causal attention over the whole sequence: this rank's outputs and the gradients of its
// queries, keys and values, in fp64.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "parallel/context_parallel.h"
#include "tests/multiprocess.h"

using namespace trident;

namespace {

// The same values on every rank.
torch::Tensor shared_random(std::vector<int64_t> shape, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  return at::normal(0.0, 1.0, shape, generator, torch::TensorOptions().dtype(torch::kDouble));
}

torch::Tensor plain_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t s = q.size(2);
  auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  auto future = torch::ones({s, s}, torch::kBool).triu(1);
  return at::matmul(scores.masked_fill(future, -INFINITY).softmax(-1), v);
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, const char* what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(torch::allclose(actual, expected, 1e-10, 1e-12))
      << what << " differs by " << (actual - expected).abs().max().item<double>();
}

}  // namespace

TEST(ContextParallel, ChunksAndPositionsBalanceTheCausalMask) {
  const ContextParallel cp{trident::testing::world_shared()};
  const int c = cp.size(), me = cp.rank();
  const int64_t s = 4 * c;  // chunks of 2
  const auto positions = context_parallel_positions(s, me, c, torch::kLong);
  const auto expected = torch::tensor({2 * me, 2 * me + 1, 2 * (2 * c - 1 - me), 2 * (2 * c - 1 - me) + 1}, torch::kLong);
  EXPECT_TRUE(torch::equal(positions, expected)) << positions;
  // Every position is held by exactly one rank.
  auto held = torch::zeros({s}, torch::kLong);
  held.index_add_(0, positions, torch::ones({4}, torch::kLong));
  cp.group->all_reduce(held);
  EXPECT_TRUE(torch::equal(held, torch::ones({s}, torch::kLong)));
}

TEST(ContextParallel, RingAttentionEqualsCausalAttention) {
  const ContextParallel cp{trident::testing::world_shared()};
  const int c = cp.size(), me = cp.rank();
  const int64_t batch = 2, heads = 3, chunk = 3, dim = 4, s = 2 * c * chunk;
  auto q = shared_random({batch, heads, s, dim}, 1), k = shared_random({batch, heads, s, dim}, 2),
       v = shared_random({batch, heads, s, dim}, 3), g = shared_random({batch, heads, s, dim}, 4);

  auto q_ref = q.clone().requires_grad_(), k_ref = k.clone().requires_grad_(), v_ref = v.clone().requires_grad_();
  auto out_ref = plain_causal_attention(q_ref, k_ref, v_ref);
  (out_ref * g).sum().backward();

  auto mine = [&](const torch::Tensor& t) { return context_parallel_slice(t, 2, me, c); };
  auto q_mine = mine(q).requires_grad_(), k_mine = mine(k).requires_grad_(), v_mine = mine(v).requires_grad_();
  auto out = ring_attention(q_mine, k_mine, v_mine, cp);
  (out * mine(g)).sum().backward();

  expect_close(out, mine(out_ref), "output");
  expect_close(q_mine.grad(), mine(q_ref.grad()), "dQ");
  expect_close(k_mine.grad(), mine(k_ref.grad()), "dK");
  expect_close(v_mine.grad(), mine(v_ref.grad()), "dV");
}
