// parallel/parameter_role.h: layers declare what each parameter is to the parallel layout.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "model/gpt.h"
#include "parallel/parameter_role.h"
#include "tests/helpers.h"

using namespace trident;

namespace {

using trident::testing::tiny_model;
using trident::testing::tiny_llama;

std::map<std::string, ParameterRole> roles_of(const torch::nn::Module& module) {
  std::map<std::string, ParameterRole> out;
  for (const auto& p : parameters_with_roles(module)) out[p.name] = p.role;
  return out;
}

}  // namespace

// Every parameter of a GPT block and its ends, as Megatron tags them: column-parallel weights
// and biases split by rows, row-parallel weights by columns with their bias whole, LayerNorms
// whole; with sequence parallelism the whole ones applied to part of the sequence (row biases,
// LayerNorms) are partial sums over TP, the position embedding is not.
TEST(ParameterRoles, GptLayersDeclareWhatTensorParallelismMakesOfThem) {
  const ModelConfig m = tiny_model();
  auto tp = std::make_shared<trident::testing::FakeGroup>(0, 2);
  GPT model(m, m.padded_vocab(2), TensorParallel{tp, /*sequence_parallel=*/true});
  const auto roles = roles_of(*model);
  EXPECT_EQ(roles.size(), size_t(4 + 2 * 12));
  struct Expected {
    const char* name;
    int64_t dim;
    bool partial_over_tp, decay;
    Init init;
  };
  for (const Expected& e : {Expected{"wte.weight", 0, false, true, Init::normal},
                            Expected{"wpe.weight", -1, false, true, Init::normal},
                            Expected{"h0.ln_1.weight", -1, true, false, Init::ones},
                            Expected{"h0.ln_1.bias", -1, true, false, Init::zeros},
                            Expected{"h0.attn.qkv.weight", 0, false, true, Init::normal},
                            Expected{"h0.attn.qkv.bias", 0, false, false, Init::zeros},
                            Expected{"h0.attn.out.weight", 1, false, true, Init::residual},
                            Expected{"h0.attn.out.bias", -1, true, false, Init::zeros},
                            Expected{"h1.mlp.up.weight", 0, false, true, Init::normal},
                            Expected{"h1.mlp.down.weight", 1, false, true, Init::residual},
                            Expected{"h1.mlp.down.bias", -1, true, false, Init::zeros},
                            Expected{"ln_f.weight", -1, true, false, Init::ones}}) {
    SCOPED_TRACE(e.name);
    ASSERT_EQ(roles.count(e.name), 1u);
    const ParameterRole& r = roles.at(e.name);
    EXPECT_EQ(r.partition_dim, e.dim);
    EXPECT_EQ(r.partial_over_tp, e.partial_over_tp);
    EXPECT_EQ(r.decay, e.decay);
    EXPECT_EQ(r.init, e.init);
    EXPECT_EQ(r.tied, Tied::no);
    // TP rank 0 counts everything; rank 1 only its shards.
    EXPECT_TRUE(r.counted_in_norm(0));
    EXPECT_EQ(r.counted_in_norm(1), e.dim >= 0);
  }
}

// model.qk_layernorm: each TP rank normalises its own heads, so the per-head norms' gradients are
// partial sums over TP with or without sequence parallelism (and whole with one rank).
TEST(ParameterRoles, PerHeadNormsArePartialOverTensorParallelRanks) {
  ModelConfig m = tiny_llama();
  m.qk_layernorm = true;
  for (const int64_t ranks : {1, 2}) {
    GPT model(m, m.padded_vocab(ranks), TensorParallel{std::make_shared<trident::testing::FakeGroup>(0, int(ranks))});
    const auto roles = roles_of(*model);
    for (const char* name : {"h0.attn.q_norm.weight", "h1.attn.k_norm.weight"}) {
      ASSERT_EQ(roles.count(name), 1u) << name;
      EXPECT_EQ(roles.at(name).partial_over_tp, ranks > 1) << name;
      EXPECT_TRUE(roles.at(name).replicated()) << name;
      EXPECT_FALSE(roles.at(name).decay) << name;
    }
    EXPECT_FALSE(roles.at("h0.ln_1.weight").partial_over_tp);  // no sequence parallelism
  }
}

// On a pipeline the first stage owns the tied embedding, the last holds the head's copy, which
// the gradient norm does not count again.
TEST(ParameterRoles, TheTiedEmbeddingIsOwnedByTheFirstStage) {
  const ModelConfig m = tiny_model();
  GPT first(m, m.padded_vocab(), TensorParallel{}, Stage::of(0, 2, LayerRange{0, 1}));
  GPT last(m, m.padded_vocab(), TensorParallel{}, Stage::of(1, 2, LayerRange{1, 1}));
  const ParameterRole owner = roles_of(*first).at("wte.weight"), copy = roles_of(*last).at("wte.weight");
  EXPECT_EQ(owner.tied, Tied::owner);
  EXPECT_EQ(copy.tied, Tied::copy);
  EXPECT_TRUE(owner.counted_in_norm(0));
  EXPECT_FALSE(copy.counted_in_norm(0));
  EXPECT_EQ(roles_of(*GPT(m, m.padded_vocab())).at("wte.weight").tied, Tied::no);
}

// A layer that registers a parameter the plain way cannot become "replicated" by accident.
TEST(ParameterRoles, AParameterWithoutARoleIsRefused) {
  struct Careless : ParallelModule {
    Careless() { register_module("proj", torch::nn::Linear(4, 4)); }
  };
  auto careless = std::make_shared<Careless>();
  try {
    parameters_with_roles(*careless);
    FAIL() << "no error";
  } catch (const InternalError& e) {
    FAIL() << "a program's mistake, not trident's: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'proj.weight' has no role"), std::string::npos) << e.what();
  }
}
