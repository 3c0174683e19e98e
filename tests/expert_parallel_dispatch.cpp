// Expert parallelism over the whole job as one expert-parallel group (2, 3 or 4 ranks), each
// rank holding two of the experts, against one process holding them all: this rank's outputs
// and the gradients of its tokens, of the router (summed over the ranks) and of its experts,
// in fp64, with token counts that differ between ranks and experts that get no tokens.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/moe.h"
#include "tests/multiprocess.h"

using namespace trident;

namespace {

// The same values on every rank.
torch::Tensor shared_random(std::vector<int64_t> shape, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  return at::normal(0.0, 1.0, shape, generator, torch::TensorOptions().dtype(torch::kDouble));
}

MoE make_moe(const ModelConfig& m, std::shared_ptr<Communicator> ep) {
  MoE moe(BlockContext{m, TensorParallel{}, Recompute::none, ContextParallel{}, std::make_shared<DropoutStreams>(), 0,
                       std::make_shared<AuxiliaryLosses>(), ExpertParallel{std::move(ep)}});
  moe->to(torch::kDouble);
  return moe;
}

}  // namespace

TEST(ExpertParallel, DispatchEqualsOneProcessHoldingEveryExpert) {
  Communicator& world = trident::testing::world();
  const int64_t ep = world.size(), rank = world.rank(), h = 8;
  ModelConfig m;
  m.hidden_size = h;
  m.num_moe_experts = 2 * ep;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 6;
  m.activation = Activation::swiglu;
  m.add_bias_linear = false;
  m.moe_aux_loss_coeff = 0;
  m.moe_z_loss_coeff = 0;
  MoE whole = make_moe(m, make_self_communicator());
  MoE mine = make_moe(m, trident::testing::world_shared());
  const int64_t local = 2;
  {
    torch::NoGradGuard no_grad;
    uint64_t seed = 11;
    for (auto& [name, p] : whole->named_parameters().pairs()) p.copy_(shared_random(p.sizes().vec(), seed++));
    // Every token's first feature is 5 (below) and the last expert scores it -100 times that:
    // it gets no tokens.
    whole->router[m.num_moe_experts - 1].zero_()[0] = -100.0;
    mine->router.copy_(whole->router);
    for (const char* name : {"gate", "up", "down"})
      mine->named_parameters()[name].copy_(whole->named_parameters()[name].narrow(0, rank * local, local));
  }
  // Rank r holds 3 + r tokens; the whole sequence is theirs in rank order.
  std::vector<int64_t> counts;
  for (int64_t r = 0; r < ep; ++r) counts.push_back(3 + r);
  const int64_t total = 3 * ep + ep * (ep - 1) / 2, first = 3 * rank + rank * (rank - 1) / 2;
  torch::Tensor all_x = shared_random({1, total, h}, 3);
  all_x.select(2, 0).fill_(5.0);
  all_x.requires_grad_();
  const torch::Tensor weights = shared_random({1, total, h}, 4);
  (whole(all_x) * weights).sum().backward();

  const torch::Tensor x = all_x.detach().narrow(1, first, counts[size_t(rank)]).clone().requires_grad_();
  const torch::Tensor out = mine(x);
  (out * weights.narrow(1, first, counts[size_t(rank)])).sum().backward();
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::allclose(out, whole(all_x).narrow(1, first, counts[size_t(rank)]), 1e-12, 1e-12));
  }
  EXPECT_TRUE(torch::allclose(x.grad(), all_x.grad().narrow(1, first, counts[size_t(rank)]), 1e-12, 1e-12));
  torch::Tensor router = mine->router.grad().clone();
  world.all_reduce(router, ReduceOp::sum);
  EXPECT_TRUE(torch::allclose(router, whole->router.grad(), 1e-11, 1e-12));
  for (const char* name : {"gate", "up", "down"}) {
    const torch::Tensor expected = whole->named_parameters()[name].grad().narrow(0, rank * local, local);
    EXPECT_TRUE(torch::allclose(mine->named_parameters()[name].grad(), expected, 1e-11, 1e-12)) << name;
  }
  // The last rank's last expert got no tokens: a zero gradient, not none.
  if (rank == ep - 1) EXPECT_EQ(mine->up.grad()[local - 1].abs().max().item<double>(), 0.0);
}
