#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/plan/flops.h"
#include "model/gpt.h"
#include "model/init.h"

#include <map>
#include "tests/helpers.h"

using namespace trident;

namespace {

using trident::testing::tiny_model;

GPT make(const ModelConfig& m, torch::Dtype dtype = torch::kFloat, uint64_t seed = 7) {
  GPT model(m, m.padded_vocab());
  model->to(dtype);
  model->initialize(seed);
  return model;
}

}  // namespace

TEST(Model, ForwardAndBackwardShapes) {
  const ModelConfig m = tiny_model();
  GPT model = make(m);
  auto tokens = torch::randint(0, m.vocab_size, {3, m.seq_length}, torch::kLong);
  auto logits = model->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, m.seq_length, 64}));
  auto loss = model->loss(tokens, tokens.roll(-1, 1));
  EXPECT_EQ(loss.dim(), 0);
  loss.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_EQ(p.value().grad().sizes(), p.value().sizes()) << p.key();
  }
  // A freshly initialised model is close to uniform over the padded vocabulary.
  EXPECT_NEAR(loss.item<double>(), std::log(64.0), 0.2);
}

TEST(Model, ParameterCountMatchesFormula) {
  const ModelConfig m = tiny_model();
  GPT model = make(m);
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  EXPECT_EQ(count, gpt_parameter_count(m, m.padded_vocab()));
}

TEST(Model, InitializationIsAFunctionOfSeedAndName) {
  const ModelConfig m = tiny_model();
  GPT a = make(m, torch::kFloat, 11), b = make(m, torch::kFloat, 11), c = make(m, torch::kFloat, 12);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
    if (item.value().dim() >= 2) EXPECT_FALSE(torch::equal(item.value(), pc[item.key()])) << item.key();
  }
  // Each full tensor is what init_normal draws for its name: a shard of any layout is a slice
  // of exactly this tensor.
  auto expected = init_normal("h1.mlp.up.weight", {64, 16}, 0.02, 11).to(torch::kFloat);
  EXPECT_TRUE(torch::equal(pa["h1.mlp.up.weight"], expected));
  auto residual = init_normal("h0.attn.out.weight", {16, 16}, 0.02 / std::sqrt(4.0), 11);
  EXPECT_TRUE(torch::equal(pa["h0.attn.out.weight"], residual.to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(pa["h0.ln_1.weight"], torch::ones({16})));
  EXPECT_TRUE(torch::equal(pa["h0.attn.qkv.bias"], torch::zeros({48})));
  // The same draw serves fp32 and fp64 models.
  GPT d = make(m, torch::kDouble, 11);
  EXPECT_TRUE(torch::equal(d->named_parameters()["wte.weight"].to(torch::kFloat), pa["wte.weight"]));
}

TEST(Model, AttentionIsCausal) {
  const ModelConfig m = tiny_model();
  GPT model = make(m);
  auto tokens = torch::randint(0, m.vocab_size, {1, m.seq_length}, torch::kLong);
  auto changed = tokens.clone();
  changed[0][5] = (changed[0][5].item<int64_t>() + 1) % m.vocab_size;
  auto before = model->forward(tokens), after = model->forward(changed);
  EXPECT_TRUE(torch::allclose(before.narrow(1, 0, 5), after.narrow(1, 0, 5)));
  EXPECT_FALSE(torch::allclose(before.narrow(1, 5, 1), after.narrow(1, 5, 1)));
}

TEST(Model, GradientsMatchFiniteDifferencesInFp64) {
  const ModelConfig m = tiny_model();
  GPT model = make(m, torch::kDouble);
  auto tokens = torch::randint(0, m.vocab_size, {2, m.seq_length}, torch::kLong);
  auto targets = torch::randint(0, m.vocab_size, {2, m.seq_length}, torch::kLong);
  model->loss(tokens, targets).backward();

  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  int checked = 0;
  for (auto& item : model->named_parameters()) {
    auto flat = item.value().view(-1);
    auto grad = item.value().grad().view(-1);
    // A few entries of every tensor, the largest-gradient one among them.
    std::vector<int64_t> entries = {0, flat.numel() / 2, grad.abs().argmax().item<int64_t>()};
    for (int64_t i : entries) {
      const double saved = flat[i].item<double>();
      flat[i] = saved + h;
      const double up = model->loss(tokens, targets).item<double>();
      flat[i] = saved - h;
      const double down = model->loss(tokens, targets).item<double>();
      flat[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double analytic = grad[i].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << item.key() << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(Model, ShardedInitializationIsASliceOfTheSerialOne) {
  ModelConfig m = tiny_model();
  GPT serial = make(m);
  auto whole = serial->named_parameters();
  for (int tp : {2, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      GPT shard(m, m.padded_vocab(), TensorParallel{std::make_shared<trident::testing::FakeGroup>(rank, tp)});
      shard->initialize(7);
      for (const auto& param : parameters_with_roles(*shard)) {
        const int64_t dim = param.role.partition_dim;
        const auto& full = whole[param.name];
        auto expected = dim < 0 ? full : full.chunk(tp, dim)[size_t(rank)];
        EXPECT_TRUE(torch::equal(param.tensor, expected)) << param.name << " rank " << rank << "/" << tp;
      }
    }
  }
}

// Recomputation changes what is stored, not what is computed: with dropout on (the RNG is
// replayed) the loss and every gradient are identical.
TEST(Model, RecomputeGivesIdenticalGradients) {
  ModelConfig m = tiny_model();
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  auto tokens = torch::randint(0, m.vocab_size, {2, m.seq_length}, torch::kLong);
  auto targets = torch::randint(0, m.vocab_size, {2, m.seq_length}, torch::kLong);
  std::map<std::string, torch::Tensor> reference;
  double reference_loss = 0;
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    GPT model(m, m.padded_vocab(), TensorParallel{}, Stage{}, mode);
    model->to(torch::kDouble);
    model->initialize(3);
    auto loss = model->loss(tokens, targets);
    loss.backward();
    if (mode == Recompute::none) {
      reference_loss = loss.item<double>();
      for (const auto& item : model->named_parameters()) reference[item.key()] = item.value().grad().clone();
      continue;
    }
    EXPECT_EQ(loss.item<double>(), reference_loss);
    for (const auto& item : model->named_parameters())
      EXPECT_TRUE(torch::equal(item.value().grad(), reference[item.key()])) << item.key();
  }
}
