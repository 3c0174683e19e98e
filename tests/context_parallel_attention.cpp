// Ring and Ulysses attention over the whole job as one context-parallel group (2, 3 or 4 ranks)
// against plain causal attention over the whole sequence: this rank's outputs and the gradients
// of its queries, keys and values, in fp64.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>

#include "parallel/context_attention.h"
#include "parallel/context_parallel.h"
#include "parallel/ulysses_attention.h"
#include "tests/multiprocess.h"

using namespace trident;

namespace {

// The same values on every rank.
torch::Tensor shared_random(std::vector<int64_t> shape, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  return at::normal(0.0, 1.0, shape, generator, torch::TensorOptions().dtype(torch::kDouble));
}

// Causal attention over the whole sequence; with `documents` ([b, s] ids) within each document.
torch::Tensor plain_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& documents = {}) {
  const int64_t s = q.size(2);
  auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  auto hidden = torch::ones({s, s}, torch::kBool).triu(1);
  if (documents.defined()) hidden = hidden.logical_or(documents.unsqueeze(2).ne(documents.unsqueeze(1)).unsqueeze(1));
  return at::matmul(scores.masked_fill(hidden, -INFINITY).softmax(-1), v);
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, const char* what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(torch::allclose(actual, expected, 1e-10, 1e-12))
      << what << " differs by " << (actual - expected).abs().max().item<double>();
}

// Plain causal attention of grouped keys and values (each group serving consecutive heads).
torch::Tensor grouped_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& documents = {}) {
  const int64_t per_group = q.size(1) / k.size(1);
  return plain_causal_attention(q, repeat_for_query_heads(k, per_group), repeat_for_query_heads(v, per_group),
                                documents);
}

using ChunkAttention = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;

// `attention` of this rank's chunks of q [b, heads, s, d] and of k, v [b, groups, s, d] (the
// whole sequence's) against the plain grouped attention of the whole: the outputs, and the
// gradients of <output, g>.
void expect_equals_plain(const ContextParallel& cp, const torch::Tensor& q, const torch::Tensor& k,
                         const torch::Tensor& v, const torch::Tensor& g, const torch::Tensor& documents,
                         const ChunkAttention& attention) {
  auto q_ref = q.clone().requires_grad_(), k_ref = k.clone().requires_grad_(), v_ref = v.clone().requires_grad_();
  auto out_ref = grouped_causal_attention(q_ref, k_ref, v_ref, documents);
  (out_ref * g).sum().backward();

  auto mine = [&](const torch::Tensor& t) { return context_parallel_slice(t, 2, cp.rank(), cp.size()); };
  auto q_mine = mine(q).requires_grad_(), k_mine = mine(k).requires_grad_(), v_mine = mine(v).requires_grad_();
  auto out = attention(q_mine, k_mine, v_mine);
  (out * mine(g)).sum().backward();

  expect_close(out, mine(out_ref), "output");
  expect_close(q_mine.grad(), mine(q_ref.grad()), "dQ");
  expect_close(k_mine.grad(), mine(k_ref.grad()), "dK");
  expect_close(v_mine.grad(), mine(v_ref.grad()), "dV");
}

void expect_ring_equals_plain(const ContextParallel& cp, const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& g, const torch::Tensor& documents = {}) {
  expect_equals_plain(cp, q, k, v, g, documents, [&](const torch::Tensor& q_mine, const torch::Tensor& k_mine,
                                                     const torch::Tensor& v_mine) {
    return ring_attention(q_mine, k_mine, v_mine, cp, 0, nullptr, documents);
  });
}

// Ulysses' local attention sees whole sequences of this rank's share of the heads.
void expect_ulysses_equals_plain(const ContextParallel& cp, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& g, const torch::Tensor& documents = {}) {
  int64_t attended_heads = 0;
  const LocalAttention local = [&](const torch::Tensor& q_all, const torch::Tensor& k_all, const torch::Tensor& v_all) {
    EXPECT_EQ(q_all.size(2), q.size(2)) << "attention sees whole sequences";
    attended_heads = q_all.size(1);
    return grouped_causal_attention(q_all, k_all, v_all, documents);
  };
  expect_equals_plain(cp, q, k, v, g, documents, [&](const torch::Tensor& q_mine, const torch::Tensor& k_mine,
                                                     const torch::Tensor& v_mine) {
    return ulysses_attention(q_mine, k_mine, v_mine, cp, local);
  });
  EXPECT_EQ(attended_heads, q.size(1) / cp.size());
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
  const int c = cp.size();
  const int64_t batch = 2, heads = 3, chunk = 3, dim = 4, s = 2 * c * chunk;
  auto q = shared_random({batch, heads, s, dim}, 1), k = shared_random({batch, heads, s, dim}, 2),
       v = shared_random({batch, heads, s, dim}, 3), g = shared_random({batch, heads, s, dim}, 4);
  expect_ring_equals_plain(cp, q, k, v, g);
}

// Packed documents: ring attention keeps each token within its document, as the plain masked
// attention does, including queries that see no key of a whole block (their document starts
// after it) and documents that span ranks.
TEST(ContextParallel, RingAttentionKeepsDocumentsApart) {
  const ContextParallel cp{trident::testing::world_shared()};
  const int c = cp.size();
  const int64_t batch = 2, heads = 2, chunk = 3, dim = 4, s = 2 * c * chunk;
  auto q = shared_random({batch, heads, s, dim}, 11), k = shared_random({batch, heads, s, dim}, 12),
       v = shared_random({batch, heads, s, dim}, 13), g = shared_random({batch, heads, s, dim}, 14);
  // Row 0: a new document every 4 tokens; row 1: documents starting at 1 and at s - 2.
  auto documents = (torch::arange(s, torch::kLong) / 4).repeat({batch, 1});
  documents[1] = torch::zeros({s}, torch::kLong);
  documents[1].narrow(0, 1, s - 1).fill_(1);
  documents[1].narrow(0, s - 2, 2).fill_(2);
  EXPECT_FALSE(torch::allclose(plain_causal_attention(q, k, v, documents), plain_causal_attention(q, k, v), 1e-6, 1e-6))
      << "the documents changed nothing";
  expect_ring_equals_plain(cp, q, k, v, g, documents);
}

// With dropout on the attention probabilities the masks are drawn block by block in forward
// and again in backward: the gradients must be those of the function forward computes, checked
// against central differences (every rank moves its inputs along a random direction, the masks
// drawn from the same stream state each time).
TEST(ContextParallel, RingAttentionDropoutGradientsMatchFiniteDifferences) {
  const ContextParallel cp{trident::testing::world_shared()};
  const int c = cp.size(), me = cp.rank();
  const int64_t s = 4 * c;
  auto mine = [&](const torch::Tensor& t) { return context_parallel_slice(t, 2, me, c); };
  const std::vector<torch::Tensor> inputs = {mine(shared_random({1, 2, s, 3}, 1)), mine(shared_random({1, 2, s, 3}, 2)),
                                             mine(shared_random({1, 2, s, 3}, 3))};
  const auto g = mine(shared_random({1, 2, s, 3}, 4));
  RandomStream stream(100 + uint64_t(me));
  const torch::Tensor start = stream.started_state(torch::kCPU).clone();
  // sum over the whole job of <ring attention, g>, with the masks `start` gives
  auto objective = [&](const std::vector<torch::Tensor>& x, double dropout) {
    stream.set_state(start);
    auto value = (ring_attention(x[0], x[1], x[2], cp, dropout, &stream) * g).sum().reshape({1});
    auto total = value.detach().clone();
    cp.group->all_reduce(total);
    return std::pair{value, total.item<double>()};
  };
  std::vector<torch::Tensor> leaves;
  for (const auto& x : inputs) leaves.push_back(x.clone().requires_grad_());
  objective(leaves, 0.3).first.sum().backward();
  EXPECT_NE(objective(inputs, 0.3).second, objective(inputs, 0.0).second) << "dropout did not act";

  for (uint64_t direction = 0; direction < 3; ++direction) {
    std::vector<torch::Tensor> along, plus, minus;
    double predicted = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      along.push_back(mine(shared_random(std::vector<int64_t>{1, 2, s, 3}, 10 + direction * 3 + i)));
      predicted += (leaves[i].grad() * along[i]).sum().item<double>();
    }
    auto summed = torch::tensor({predicted}, torch::kDouble);
    cp.group->all_reduce(summed);
    const double eps = 1e-6;
    for (size_t i = 0; i < inputs.size(); ++i) {
      plus.push_back(inputs[i] + eps * along[i]);
      minus.push_back(inputs[i] - eps * along[i]);
    }
    const double measured = (objective(plus, 0.3).second - objective(minus, 0.3).second) / (2 * eps);
    EXPECT_NEAR(measured, summed.item<double>(), 1e-7 * std::max(1.0, std::abs(measured))) << "direction " << direction;
  }
}

// 12 heads deal out to 2, 3 and 4 ranks; their key/value groups deal out evenly (12), must be
// repeated at some sizes (4 over 3 ranks, 2 over 4) or always (1, multi-query attention).
TEST(ContextParallel, UlyssesAttentionEqualsCausalAttentionForEveryGrouping) {
  const ContextParallel cp{trident::testing::world_shared()};
  const int c = cp.size();
  const int64_t batch = 2, heads = 12, chunk = 2, dim = 4, s = 2 * c * chunk;
  for (int64_t groups : {12, 4, 2, 1}) {
    SCOPED_TRACE(::testing::Message() << groups << " key/value groups");
    auto q = shared_random({batch, heads, s, dim}, 21), k = shared_random({batch, groups, s, dim}, 22),
         v = shared_random({batch, groups, s, dim}, 23), g = shared_random({batch, heads, s, dim}, 24);
    expect_ulysses_equals_plain(cp, q, k, v, g);
  }
}

TEST(ContextParallel, UlyssesAttentionKeepsDocumentsApart) {
  const ContextParallel cp{trident::testing::world_shared()};
  const int c = cp.size();
  const int64_t batch = 2, heads = 12, groups = 4, chunk = 3, dim = 4, s = 2 * c * chunk;
  auto q = shared_random({batch, heads, s, dim}, 31), k = shared_random({batch, groups, s, dim}, 32),
       v = shared_random({batch, groups, s, dim}, 33), g = shared_random({batch, heads, s, dim}, 34);
  auto documents = (torch::arange(s, torch::kLong) / 5).repeat({batch, 1});
  documents[1].narrow(0, 0, 1).fill_(7);  // a document of one token, then one to the end
  documents[1].narrow(0, 1, s - 1).fill_(8);
  expect_ulysses_equals_plain(cp, q, k, v, g, documents);
}

// USP: Ulysses within groups of u consecutive ranks and a ring across the groups, for every u that
// divides the ranks (u = 1: the ring alone; u = c: Ulysses alone; np 4: pairs, a ring of 2),
// with key/value groups that deal out evenly, are repeated, or are one, and with documents.
TEST(ContextParallel, UspEqualsCausalAttentionForEverySplit) {
  const auto world = trident::testing::world_shared();
  const int c = world->size(), me = world->rank();
  const int64_t batch = 2, heads = 12, chunk = 3, dim = 4, s = 2 * c * chunk;
  auto documents = (torch::arange(s, torch::kLong) / 5).repeat({batch, 1});
  documents[1].narrow(0, 0, 1).fill_(7);
  for (int u = 1; u <= c; ++u) {
    if (c % u != 0) continue;
    // Collective over the world: every rank splits the same groups in the same order.
    const ContextParallel cp{world, world->split(me / u, me % u), world->split(me % u, me / u)};
    for (int64_t groups : {12, 4, 1}) {
      SCOPED_TRACE(::testing::Message() << u << " Ulysses ranks in a ring of " << c / u << ", " << groups
                                        << " key/value groups");
      auto q = shared_random({batch, heads, s, dim}, 41), k = shared_random({batch, groups, s, dim}, 42),
           v = shared_random({batch, groups, s, dim}, 43), g = shared_random({batch, heads, s, dim}, 44);
      const LocalAttention whole = [&](const torch::Tensor& q_all, const torch::Tensor& k_all,
                                       const torch::Tensor& v_all) {
        EXPECT_EQ(q_all.size(2), s) << "without a ring, attention sees whole sequences";
        return grouped_causal_attention(q_all, k_all, v_all, documents);
      };
      expect_equals_plain(cp, q, k, v, g, documents, [&](const torch::Tensor& q_mine, const torch::Tensor& k_mine,
                                                         const torch::Tensor& v_mine) {
        return context_attention(q_mine, k_mine, v_mine, cp, whole, 0, nullptr, documents);
      });
    }
  }
}
