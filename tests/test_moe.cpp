// The Mixture-of-Experts MLP (model/moe.h): routing and experts against a token-by-token
// reference, its two losses against their formulas, its keys' errors, and a model with experts
// trained at every layout equal to one process (fp64).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <tuple>

#include "core/config.h"
#include "core/layout.h"
#include "model/expert_bias.h"
#include "model/moe.h"
#include "train/expert_balance.h"
#include "train/families/family.h"
#include "train/layout_check.h"
#include "tests/helpers.h"
#include "tests/launchers.h"
#include "tests/run_comparison.h"
#include "train/checkpoint/checkpoint.h"

using namespace trident;
using namespace trident::testing;

namespace {

ModelConfig experts_config(Activation activation) {
  ModelConfig m;
  m.hidden_size = 8;
  m.num_moe_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 6;
  m.activation = activation;
  m.add_bias_linear = false;
  m.moe_aux_loss_coeff = 0.5;
  m.moe_z_loss_coeff = 0.25;
  return m;
}

// One process's MoE with normal weights (fp64).
MoE make_moe(const ModelConfig& m, std::shared_ptr<AuxiliaryLosses> auxiliary) {
  MoE moe(BlockContext{m, TensorParallel{}, Recompute::none, ContextParallel{}, std::make_shared<DropoutStreams>(), 0,
                       std::move(auxiliary)});
  torch::manual_seed(7);
  moe->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  for (auto& p : moe->parameters()) p.normal_(0, 0.5);
  return moe;
}

double declared_value(const torch::Tensor& values, const std::string& name) {
  const auto names = declared_auxiliary_losses();
  const auto at = std::find(names.begin(), names.end(), name);
  EXPECT_NE(at, names.end()) << name;
  return values[at - names.begin()].item<double>();
}

// moe-tiny on synthetic tokens in fp64 with `settings`, in one process and at each of `layouts`
// under mpirun: every iteration's losses, aux/ and moe/ values and the final weights equal the
// single process's (train/layout_check.h), the report printed.
void expect_every_layout_trains_the_same(const std::vector<std::string>& settings,
                                         const std::vector<std::vector<std::string>>& layouts,
                                         const std::string& name) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  LayoutCheck check;
  check.program = kBin + "/train";
  check.launcher = kMpirun;
  check.arguments = {"--config", kSource + "/configs/moe-tiny.yaml", "data.type=synthetic", "precision=fp64",
                     "train.log_interval=1", "train.eval_interval=0"};
  check.arguments.insert(check.arguments.end(), settings.begin(), settings.end());
  check.layouts = layouts;
  check.work_dir = (scratch_dir() / name).string();
  const LayoutCheckResult result = check_layouts(check);
  EXPECT_TRUE(result.equal) << result.report;
  std::printf("%s", result.report.c_str());
}

}  // namespace

// Each token goes to its two highest-scoring experts, weighted by the softmax over those two
// scores, each expert an MLP of the model's activation; both activations.
TEST(MoE, RoutesEachTokenToItsTopExpertsWeightedBySoftmax) {
  for (Activation activation : {Activation::swiglu, Activation::gelu}) {
    SCOPED_TRACE(name(activation));
    const ModelConfig m = experts_config(activation);
    MoE moe = make_moe(m, std::make_shared<AuxiliaryLosses>());
    const torch::Tensor x = torch::randn({2, 5, m.hidden_size}, torch::kDouble);
    torch::NoGradGuard no_grad;
    const torch::Tensor out = moe(x);
    const torch::Tensor tokens = x.reshape({-1, m.hidden_size});
    for (int64_t i = 0; i < tokens.size(0); ++i) {
      const torch::Tensor t = tokens[i];
      const auto [scores, chosen] = at::matmul(moe->router, t).topk(2);
      const torch::Tensor weights = scores.softmax(0);
      torch::Tensor expected = torch::zeros_like(t);
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t e = chosen[j].item<int64_t>();
        const torch::Tensor hidden = activation == Activation::swiglu
                                         ? at::silu(at::matmul(moe->gate[e], t)) * at::matmul(moe->up[e], t)
                                         : at::gelu(at::matmul(moe->up[e], t), "tanh");
        expected += weights[j] * at::matmul(moe->down[e], hidden);
      }
      EXPECT_TRUE(torch::allclose(out.reshape({-1, m.hidden_size})[i], expected, 1e-12, 1e-12)) << "token " << i;
    }
  }
}

// The load-balancing loss is E / (k T^2) sum_e P_e n_e (P_e the summed softmax probabilities of
// expert e, n_e the tokens routed to it) and the z-loss the mean squared logsumexp of the
// logits, each recorded times its coefficient, and their gradients reach the router; with
// gradients only.
TEST(MoE, AddsTheLoadBalancingAndZLosses) {
  const ModelConfig m = experts_config(Activation::swiglu);
  declare_moe_losses(m);
  auto auxiliary = std::make_shared<AuxiliaryLosses>();
  MoE moe = make_moe(m, auxiliary);
  const torch::Tensor x = torch::randn({3, 4, m.hidden_size}, torch::kDouble);
  auxiliary->begin_iteration(1.0);
  (moe(x) * 0).sum().backward();  // the output's own gradient is zero: only the losses train
  const torch::Tensor router = moe->router.detach().clone().requires_grad_();
  const torch::Tensor logits = at::matmul(x.reshape({-1, m.hidden_size}), router.t());
  const torch::Tensor routed = at::bincount(std::get<1>(logits.topk(2)).reshape({-1}), {}, 4).to(torch::kDouble);
  const double T = 12;
  const torch::Tensor balance = (logits.softmax(-1).sum(0) * routed).sum() * 4 / (2 * T * T);
  const torch::Tensor z = logits.logsumexp(-1).square().mean();
  EXPECT_NEAR(declared_value(auxiliary->values(), "moe_load_balancing"), 0.5 * balance.item<double>(), 1e-12);
  EXPECT_NEAR(declared_value(auxiliary->values(), "moe_z"), 0.25 * z.item<double>(), 1e-12);
  (0.5 * balance + 0.25 * z).backward();
  EXPECT_TRUE(torch::allclose(moe->router.grad(), router.grad(), 1e-12, 1e-12))
      << moe->router.grad() << "\n" << router.grad();
  // Evaluation adds nothing.
  auxiliary->begin_iteration(1.0);
  torch::NoGradGuard no_grad;
  moe(x);
  EXPECT_FALSE(auxiliary->values().defined());
}

// With a capacity factor each expert takes at most ceil(factor x T x k / E) of the micro-batch's
// assignments, its most probable ones by the softmax over all experts; a dropped assignment adds
// nothing to its token's output. The load records what the router chose and what was dropped.
TEST(MoE, ACapacityDropsEachExpertsLeastProbableAssignments) {
  ModelConfig m = experts_config(Activation::swiglu);
  m.moe_expert_capacity_factor = 0.5;  // 12 tokens x 2 / 4 experts x 0.5: 3 assignments an expert
  m.moe_aux_loss_coeff = 0;
  m.moe_z_loss_coeff = 0;
  auto load = std::make_shared<ExpertLoad>(1, 4);
  MoE moe(BlockContext{m, TensorParallel{}, Recompute::none, ContextParallel{}, std::make_shared<DropoutStreams>(), 0,
                       std::make_shared<AuxiliaryLosses>(), ExpertParallel{}, load});
  torch::manual_seed(7);
  moe->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : moe->parameters()) p.normal_(0, 0.5);
  }
  const torch::Tensor x = torch::randn({2, 6, m.hidden_size}, torch::kDouble);
  load->begin_iteration();
  const torch::Tensor out = moe(x);
  const torch::Tensor tokens = x.reshape({-1, m.hidden_size});
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = at::matmul(tokens, moe->router.t());
  const auto [scores, chosen] = logits.topk(2);
  const torch::Tensor probability = logits.softmax(-1);
  // An assignment is kept when fewer than 3 of its expert's assignments are more probable.
  auto kept = [&](int64_t token, int64_t slot) {
    const int64_t e = chosen[token][slot].item<int64_t>();
    const double p = probability[token][e].item<double>();
    int64_t more_probable = 0;
    for (int64_t t = 0; t < tokens.size(0); ++t)
      for (int64_t j = 0; j < 2; ++j)
        if (chosen[t][j].item<int64_t>() == e && probability[t][e].item<double>() > p) ++more_probable;
    return more_probable < 3;
  };
  int64_t dropped = 0;
  for (int64_t i = 0; i < tokens.size(0); ++i) {
    const torch::Tensor weights = scores[i].softmax(0);
    torch::Tensor expected = torch::zeros({m.hidden_size}, torch::kDouble);
    for (int64_t j = 0; j < 2; ++j) {
      if (!kept(i, j)) {
        ++dropped;
        continue;
      }
      const int64_t e = chosen[i][j].item<int64_t>();
      const torch::Tensor t = tokens[i];
      expected += weights[j] * at::matmul(moe->down[e], at::silu(at::matmul(moe->gate[e], t)) * at::matmul(moe->up[e], t));
    }
    EXPECT_TRUE(torch::allclose(out.reshape({-1, m.hidden_size})[i], expected, 1e-12, 1e-12)) << "token " << i;
  }
  EXPECT_GT(dropped, 0);
  const torch::Tensor routed = at::bincount(chosen.reshape({-1}), {}, 4).to(torch::kDouble);
  EXPECT_TRUE(torch::equal(load->counts()[0].narrow(0, 0, 4), routed));
  EXPECT_EQ(load->counts()[0][4].item<double>(), double(dropped));
}

// DeepSeek-V3's routing: each expert's sigmoid score, the top k chosen by score plus the expert's
// bias, weighted by their scores normalised to sum to 1 (not by the bias) times the scaling
// factor. A large bias on expert 3 makes every token take it, at its own score's weight.
TEST(MoE, SigmoidRoutingChoosesWithTheBiasAndWeighsWithoutIt) {
  ModelConfig m = experts_config(Activation::gelu);
  m.moe_router_score_function = RouterScore::sigmoid;
  m.moe_router_topk_scaling_factor = 2.5;
  m.moe_router_enable_expert_bias = true;
  m.moe_aux_loss_coeff = 0;
  m.moe_z_loss_coeff = 0;
  auto bias = std::make_shared<ExpertBias>(1, 4, 0.1);
  bias->restore({0.0, 0.0, 0.0, 10.0});
  MoE moe(BlockContext{m, TensorParallel{}, Recompute::none, ContextParallel{}, std::make_shared<DropoutStreams>(), 0,
                       std::make_shared<AuxiliaryLosses>(), ExpertParallel{}, nullptr, bias});
  torch::manual_seed(7);
  moe->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  for (auto& p : moe->parameters()) p.normal_(0, 0.5);
  const torch::Tensor x = torch::randn({2, 5, m.hidden_size}, torch::kDouble);
  const torch::Tensor out = moe(x).reshape({-1, m.hidden_size});
  const torch::Tensor tokens = x.reshape({-1, m.hidden_size});
  for (int64_t i = 0; i < tokens.size(0); ++i) {
    const torch::Tensor scores = at::matmul(moe->router, tokens[i]).sigmoid();
    const torch::Tensor others = scores.narrow(0, 0, 3);
    const int64_t second = others.argmax().item<int64_t>();  // beside expert 3, the best of the rest
    const double sum = scores[3].item<double>() + scores[second].item<double>();
    torch::Tensor expected = torch::zeros({m.hidden_size}, torch::kDouble);
    for (const int64_t e : {int64_t(3), second})
      expected += 2.5 * scores[e].item<double>() / sum *
                  at::matmul(moe->down[e], at::gelu(at::matmul(moe->up[e], tokens[i]), "tanh"));
    EXPECT_TRUE(torch::allclose(out[i], expected, 1e-12, 1e-12)) << "token " << i;
  }
}

// The bias moves by its rate towards an even load: up under the mean, down over it, not at it,
// and not at all in a layer without tokens; the dropped column is not load.
TEST(MoE, TheExpertBiasMovesTowardsAnEvenLoad) {
  ExpertBias bias(2, 4, 0.1);
  bias.update(torch::tensor({3.0, 1.0, 0.0, 2.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0}, torch::kDouble).view({2, 5}));
  EXPECT_EQ(bias.values(), (std::vector<double>{-0.1, 0.1, 0.1, -0.1, 0, 0, 0, 0}));
  bias.update(torch::tensor({1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, torch::kDouble).view({2, 5}));
  EXPECT_EQ(bias.values(), (std::vector<double>{-0.1, 0.1, 0.1, -0.1, 0, 0, 0, 0}));
}

// The log's expert balance: the worst layer's most loaded expert over the mean, and what was
// dropped; layers without tokens (dense ones) do not count.
TEST(MoE, BalanceIsTheWorstLayersMostLoadedExpertOverTheMean) {
  const torch::Tensor counts = torch::tensor({3.0, 1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 0.0, 1.0},
                                             torch::kDouble).view({3, 4});
  const auto values = expert_balance_values(counts, /*capacity=*/true);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0].first, "load_imbalance");
  EXPECT_DOUBLE_EQ(values[0].second, 3.0 / (4.0 / 3));
  EXPECT_EQ(values[1].first, "dropped");
  EXPECT_EQ(values[1].second, 3.0);
  EXPECT_EQ(expert_balance_values(counts, /*capacity=*/false).size(), 1u);
}

TEST(MoE, BadKeysGetOneLineNamingThem) {
  const std::string tiny = kSource + "/configs/moe-tiny.yaml";
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.moe_router_topk=9"}); })
                .find("model.moe_router_topk (9) must not exceed model.num_moe_experts (8)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.add_bias_linear=true"}); })
                .find("model.num_moe_experts: experts have no biases here"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.num_moe_experts=-1"}); }).find("model.num_moe_experts"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.moe_layer_freq=0"}); }).find("model.moe_layer_freq"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_layout(Config::load(tiny, {"model.moe_shared_expert_intermediate_size=33",
                                                               "parallel.tensor=2"}), 2); })
                .find("model.moe_shared_expert_intermediate_size (33) must be divisible by parallel.tensor (2)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.moe_router_score_function=tanh"}); })
                .find("model.moe_router_score_function"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Config::load(kSource + "/configs/gpt-tiny.yaml", {"model.moe_router_enable_expert_bias=true"});
            }).find("model.moe_router_enable_expert_bias is set but model.num_moe_experts is 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.moe_expert_capacity_factor=-1"}); })
                .find("model.moe_expert_capacity_factor"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Config::load(kSource + "/configs/gpt-tiny.yaml", {"model.moe_expert_capacity_factor=1.25"});
            }).find("model.moe_expert_capacity_factor is set but model.num_moe_experts is 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.num_moe_experts=0"}); })
                .find("model.moe_ffn_hidden_size is set but model.num_moe_experts is 0: there are no experts"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.block=my_block"}); })
                .find("model.num_moe_experts: experts are the built-in block's MLPs, not model.block=my_block's"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_layout(Config::load(tiny, {"model.moe_ffn_hidden_size=97", "parallel.tensor=2"}), 2); })
                .find("model.moe_ffn_hidden_size (effective) (97) must be divisible by parallel.tensor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"model.moe_router_pre_softmax=true", "model.moe_router_score_function=sigmoid"}); })
                .find("model.moe_router_pre_softmax is a softmax router's choice, but model.moe_router_score_function=sigmoid"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(kSource + "/configs/gpt-tiny.yaml", {"model.moe_router_pre_softmax=true"}); })
                .find("model.moe_router_pre_softmax is set but model.num_moe_experts is 0"),
            std::string::npos);
  // Hugging Face's GPT-2 and Llama hold no experts; Mixtral and Qwen3-MoE hold moe-tiny, and
  // refuse by key what their routing cannot follow.
  EXPECT_NE(error_of([&] { family_of(Config::load(tiny, {"model.moe_router_score_function=sigmoid"}).model); })
                .find("model.num_moe_experts=8 is not llama's, model.qk_layernorm=false is not qwen3's, "
                      "model.moe_router_score_function=sigmoid is not mixtral's, model.qk_layernorm=false is not qwen3_moe's"),
            std::string::npos);
  EXPECT_EQ(family_of(Config::load(tiny).model).model_type, "mixtral");
  EXPECT_EQ(family_of(Config::load(tiny, {"model.qk_layernorm=true"}).model).model_type, "qwen3_moe");
  for (const auto& [setting, unheld] :
       {std::pair{"model.moe_shared_expert_intermediate_size=64", "model.moe_shared_expert_intermediate_size=64 is not qwen3_moe's"},
        std::pair{"model.moe_router_topk_scaling_factor=2.5", "model.moe_router_topk_scaling_factor=2.5 is not qwen3_moe's"},
        std::pair{"model.moe_router_enable_expert_bias=true", "model.moe_router_enable_expert_bias=true is not qwen3_moe's"},
        std::pair{"model.moe_layer_freq=2", "model.moe_layer_freq=2 is not qwen3_moe's"}})
    EXPECT_NE(error_of([&] { family_of(Config::load(tiny, {"model.qk_layernorm=true", setting}).model); }).find(unheld),
              std::string::npos)
        << setting;
  EXPECT_NE(error_of([&] { family_of(Config::load(tiny, {"model.moe_first_dense_layers=1"}).model); })
                .find("model.moe_first_dense_layers=1 is not mixtral's"),
            std::string::npos);
}

// Each sweep below is cut in two: its layouts that together take every path of the experts through
// LibTorch (run in both lanes), and the others (labelled `once`: tests/lanes.cmake), which prove
// the same code's index arithmetic at more layouts; each half trains its own single process.

// moe-tiny (2 layers, both with experts, both losses) trains as one process does with tensor
// parallelism (with and without sequence parallelism), context parallelism (alone, and with
// sequence parallelism, where the losses' sums cross both), pipeline parallelism (1F1B and ZB-H1,
// its experts' backward split: SplitBackward.ExpertsUnboundFromOneWeightSplitTogether) and ZeRO-3
// over data parallelism, recomputation included (fp64: losses, auxiliary losses and weights).
const std::vector<std::string> kTwoLayers = {"model.num_layers=2", "train.iters=3"};
TEST(MoE, TrainsTheSameAtEveryLayout) {
  expect_every_layout_trains_the_same(kTwoLayers,
                                      {{"parallel.tensor=2", "parallel.sequence_parallel=true", "recompute=selective"},
                                       {"parallel.context=2", "parallel.tensor=2", "parallel.sequence_parallel=true"},
                                       {"parallel.pipeline=2", "parallel.schedule=zb-h1", "recompute=full"},
                                       {"parallel.data=2", "parallel.zero_stage=3"}},
                                      "moe");
}
TEST(MoEOnce, TrainsTheSameWithEachDimensionAlone) {
  expect_every_layout_trains_the_same(
      kTwoLayers, {{"parallel.tensor=2"}, {"parallel.context=2"}, {"parallel.pipeline=2", "recompute=full"}}, "moe");
}

// Expert parallelism (the experts dealt out over ranks carved from data x context parallelism,
// tokens moved by all-to-all) trains as one process does: EP 2 and EP 4 over data parallelism,
// ZeRO 1-3 (at EP 2 x DP 4 the experts' optimizer state is sharded over their two copies),
// recomputation, EP 2 x TP 2 (sequence parallel) x PP 2, EP carved from context parallelism, the
// interleaved schedule, ZB-V and DualPipe-V (fp64: losses, auxiliary losses and weights, from checkpoints written
// by every expert-parallel rank).
const std::vector<std::string> kTwoSamples = {"batch.micro_batch_size=2", "train.iters=3"};
TEST(MoE, ExpertParallelTrainsTheSameAtEveryLayout) {
  expect_every_layout_trains_the_same(
      kTwoSamples,
      {{"parallel.data=4", "parallel.expert=2", "parallel.zero_stage=2", "recompute=full"},
       {"parallel.data=2", "parallel.expert=2", "parallel.zero_stage=3"},
       {"parallel.data=2", "parallel.expert=2", "parallel.tensor=2", "parallel.sequence_parallel=true",
        "parallel.pipeline=2"},
       {"parallel.context=2", "parallel.expert=2", "parallel.pipeline=2", "parallel.virtual_stages=2",
        "parallel.schedule=dualpipe-v"}},
      "ep");
}
TEST(MoEOnce, ExpertParallelTrainsTheSameWithEveryScheduleAndDegree) {
  expect_every_layout_trains_the_same(kTwoSamples,
                                      {{"parallel.data=2", "parallel.expert=2"},
                                       {"parallel.data=4", "parallel.expert=4", "parallel.zero_stage=1"},
                                       {"parallel.context=2", "parallel.expert=2"},
                                       {"parallel.data=2", "parallel.expert=2", "parallel.pipeline=2",
                                        "parallel.virtual_stages=2", "parallel.schedule=interleaved_1f1b"},
                                       {"parallel.data=2", "parallel.expert=2", "parallel.pipeline=2",
                                        "parallel.virtual_stages=2", "parallel.schedule=zb-v"}},
                                      "ep");
}

// A capacity decides over the micro-batch's tokens whichever ranks hold them, so dropping trains
// as one process does too: over context parallelism (the choices gathered), sequence
// parallelism, expert parallelism and pipeline stages; the experts' load and the dropped count
// (moe/ values) are compared with the single process's as well. A shared expert (a dense MLP
// beside the routed ones, split over TP as the dense MLP is) rides along.
const std::vector<std::string> kCapacity = {"model.num_layers=2", "model.moe_expert_capacity_factor=1.0",
                                            "model.moe_shared_expert_intermediate_size=64", "batch.micro_batch_size=2",
                                            "train.iters=3"};
TEST(MoE, WithACapacityAndASharedExpertTrainsTheSameAtEveryLayout) {
  expect_every_layout_trains_the_same(kCapacity,
                                      {{"parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.context=2"},
                                       {"parallel.data=2", "parallel.expert=2", "parallel.pipeline=2"}},
                                      "capacity");
}
TEST(MoEOnce, WithACapacityAndASharedExpertTrainsTheSameOverContextOrZeroThree) {
  expect_every_layout_trains_the_same(
      kCapacity, {{"parallel.context=2"}, {"parallel.tensor=2", "parallel.data=2", "parallel.zero_stage=3"}},
      "capacity");
}

// DeepSeek-V3's routing (sigmoid scores, the routed scaling factor, the expert bias that moves
// after every iteration by the load summed over the job) with a shared expert trains as one
// process does: the bias is the same on every rank without being exchanged.
TEST(MoE, DeepSeekRoutingTrainsTheSameAtEveryLayout) {
  expect_every_layout_trains_the_same(
      {"model.num_layers=2", "model.moe_router_score_function=sigmoid", "model.moe_router_topk_scaling_factor=2.5",
       "model.moe_router_enable_expert_bias=true", "model.moe_router_bias_update_rate=0.01", "model.moe_aux_loss_coeff=0",
       "model.moe_shared_expert_intermediate_size=64", "batch.micro_batch_size=2", "train.iters=4"},
      {{"parallel.data=2", "parallel.expert=2", "parallel.pipeline=2"},
       {"parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.context=2"}},
      "deepseek");
}

// Qwen3-MoE's shape (per-head query/key norms, a head size of 64 where hidden / heads is 32, a
// dense first layer, pre-softmax routing) trains as one process does: each tensor-parallel rank
// normalises its own heads, so the norms' gradients are summed over TP (with and without
// sequence parallelism), and context and expert parallelism leave them whole.
TEST(MoE, Qwen3ShapeTrainsTheSameAtEveryLayout) {
  expect_every_layout_trains_the_same(
      {"model.num_layers=2", "model.kv_channels=64", "model.qk_layernorm=true", "model.moe_first_dense_layers=1",
       "model.ffn_hidden_size=192", "model.moe_router_pre_softmax=true", "batch.micro_batch_size=2", "train.iters=3"},
      {{"parallel.tensor=2"},
       {"parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.data=2", "parallel.expert=2"},
       {"parallel.context=2", "parallel.expert=2", "parallel.pipeline=2"}},
      "qwen3");
}

// A checkpoint saved at EP 2 x DP 2 (ZeRO-1) resumes at EP 4 x DP 4 (ZeRO-2) and in one process,
// each continuing the single process's straight run (fp64): the experts' weights and optimizer
// state are stored as pieces of the whole [E, ...] tensors, which any expert-parallel degree
// reads back, and the routing bias (DeepSeek-V3's, on here) comes back from progress.yaml.
TEST(MoE, CheckpointsResumeAtAnotherExpertParallelDegree) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  constexpr int kIters = 4, kStopAt = 2;
  auto train = [&](const std::string& launcher, const std::filesystem::path& run, int iters,
                   const std::vector<std::string>& layout) {
    std::string command = "timeout 300 " + launcher + kBin + "/train --config " + kSource + "/configs/moe-tiny.yaml";
    for (const std::string& setting :
         {std::string("data.type=synthetic"), std::string("precision=fp64"), std::string("batch.micro_batch_size=2"),
          str("train.iters=", iters), str("optimizer.decay_iters=", kIters), std::string("train.eval_interval=0"),
          std::string("model.moe_router_enable_expert_bias=true"), std::string("model.moe_router_bias_update_rate=0.05"),
          std::string("train.log_interval=1"), "train.checkpoint_dir=" + (run / "ckpt").string(),
          "train.metrics_file=" + (run / "metrics.jsonl").string()})
      command += " " + setting;
    for (const auto& setting : layout) command += " " + setting;
    const CommandResult r = run_command(command);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  auto result = [&](const std::filesystem::path& run, std::vector<double> before) {
    for (double loss : read_losses(run / "metrics.jsonl")) before.push_back(loss);
    return RunResult{before, read_global_weights(CheckpointStore((run / "ckpt").string()).path(kIters))};
  };
  train("", dir / "straight", kIters, {});
  const RunResult straight = result(dir / "straight", {});
  ASSERT_EQ(straight.losses.size(), size_t(kIters));
  train(kMpirun + "4 ", dir / "saved", kStopAt, {"parallel.data=4", "parallel.expert=2", "parallel.zero_stage=1"});
  const std::vector<double> first = read_losses(dir / "saved" / "metrics.jsonl");
  ASSERT_EQ(first.size(), size_t(kStopAt));
  for (const auto& [name, launcher, layout] :
       {std::tuple{"ep4-dp4-zero2", kMpirun + "4 ",
                   std::vector<std::string>{"parallel.data=4", "parallel.expert=4", "parallel.zero_stage=2"}},
        std::tuple{"one-process", std::string(), std::vector<std::string>{}}}) {
    SCOPED_TRACE(name);
    const auto run = dir / name;
    std::filesystem::create_directories(run);
    std::filesystem::copy(dir / "saved" / "ckpt", run / "ckpt", std::filesystem::copy_options::recursive);
    const std::string output = train(launcher, run, kIters, layout);
    EXPECT_NE(output.find("resumed from"), std::string::npos);
    expect_equal_runs(straight, result(run, first), /*fp64=*/true);
    // The memory estimate knows the experts' share and their sharding: each state as measured.
    const std::regex state(R"((weights|grads|optimizer) ([0-9.]+ [KMG]?i?B) \(([0-9.]+ [KMG]?i?B)\))");
    int states = 0;
    for (std::sregex_iterator it(output.begin(), output.end(), state), end; it != end; ++it, ++states)
      EXPECT_EQ((*it)[2].str(), (*it)[3].str()) << (*it)[0].str();
    EXPECT_EQ(states, 3) << output;
  }
}

TEST(MoE, ExpertParallelKeysGetOneLineNamingThem) {
  const std::string tiny = kSource + "/configs/moe-tiny.yaml";
  EXPECT_NE(error_of([&] { resolve_layout(Config::load(tiny, {"parallel.expert=3"}), 3); })
                .find("model.num_moe_experts (8) must be divisible by parallel.expert (3)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_layout(Config::load(tiny, {"parallel.expert=4", "parallel.tensor=2"}), 4); })
                .find("parallel.expert (4) must divide the data- and context-parallel ranks (2 x 1 = 2)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              resolve_layout(Config::load(kSource + "/configs/gpt-tiny.yaml", {"parallel.expert=2"}), 2);
            }).find("parallel.expert=2 splits the experts of a Mixture-of-Experts model, but model.num_moe_experts is 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(tiny, {"parallel.expert=0"}); }).find("parallel.expert"), std::string::npos);
  // The expert grid: EP 2 x EDP 2 over DP 4, and the layout says so.
  const Layout layout = resolve_layout(Config::load(tiny, {"parallel.expert=2", "batch.micro_batch_size=2"}), 4);
  EXPECT_EQ(layout.expert_grid().groups({"ep"}), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(layout.expert_grid().groups({"edp"}), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(describe_axes(layout), "TP 1 x PP 1 x DP 4 (experts: EP 2 x EDP 2)");
}
