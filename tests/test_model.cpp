#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/plan/flops.h"
#include "model/gpt.h"
#include "model/init.h"
#include "train/data/samples.h"

#include <algorithm>
#include <map>
#include <set>
#include "tests/helpers.h"

using namespace trident;

namespace {

using trident::testing::tiny_llama;
using trident::testing::tiny_model;
using trident::testing::tiny_moe;

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
  ModelConfig qwen3_like = tiny_moe();  // heads of 6 channels where hidden / heads is 4, q/k norms
  qwen3_like.kv_channels = 6;
  qwen3_like.qk_layernorm = true;
  for (const ModelConfig& m : {tiny_model(), tiny_llama(), tiny_moe(), qwen3_like}) {
    GPT model = make(m);
    int64_t count = 0;
    for (const auto& p : model->parameters()) count += p.numel();
    EXPECT_EQ(count, gpt_parameter_count(m, m.padded_vocab()));
  }
  // By hand, tiny_llama: per layer QKV 16 x (4 + 2 x 2) x 4 = 512, out 256, MLP 3 x 16 x 40 = 1920,
  // two RMSNorms 32: 2720; two layers 5440, embedding and head 2 x 64 x 16 = 2048, final norm 16.
  EXPECT_EQ(gpt_parameter_count(tiny_llama(), 64), 5440 + 2048 + 16);
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

// Dropout streams are seeded by a chunk's first slot: with the embedding and the loss as layers
// the embedding-only chunk and the next both start at layer 0, and must still draw other masks.
TEST(Model, EveryChunkStartsAtItsOwnSlot) {
  for (bool ends : {false, true}) {
    const int64_t layers = 4, chunks = ends ? 6 : 4;
    std::set<int64_t> slots;
    for (int64_t i = 0; i < chunks; ++i) slots.insert(Stage::of(i, chunks, chunk_layers(layers, chunks, i, ends)).first_slot());
    EXPECT_EQ(int64_t(slots.size()), chunks) << "ends as layers: " << ends;
  }
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

namespace trident {
// GPT-2, Llama, or Llama with experts (the families' tests' parameters).
std::string family_name(const ModelConfig& m) {
  return m.num_moe_experts > 0 ? "LlamaMoe" : m.non_standard_gpt_setting().empty() ? "Gpt2" : "Llama";
}
void PrintTo(const ModelConfig& m, std::ostream* out) { *out << family_name(m); }
}  // namespace trident

class BothFamilies : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(BothFamilies, GradientsMatchFiniteDifferencesInFp64) {
  const ModelConfig m = GetParam();
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

TEST_P(BothFamilies, ShardedInitializationIsASliceOfTheSerialOne) {
  const ModelConfig m = GetParam();
  GPT serial = make(m);
  auto whole = serial->named_parameters();
  for (int tp : {2, 4}) {
    if (m.query_groups() % tp != 0) continue;
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
TEST_P(BothFamilies, RecomputeGivesIdenticalGradients) {
  ModelConfig m = GetParam();
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

// Two documents packed into one sequence, kept apart (attention within each, positions
// restarting, no loss where the input is the end-of-document token), give each token the logits
// it gets when each document runs alone, and the same gradients: fp64, in every recompute mode.
// Beside them in the batch, a sequence of one document gives what it gives unpacked.
TEST_P(BothFamilies, PackedDocumentsEqualSeparateDocumentsInFp64) {
  const ModelConfig m = GetParam();
  const int64_t eod = m.vocab_size - 1;
  // Row 0: a0 a1 a2 EOD b0 b1 b2 b3 (b4 the last target); row 1: one document of 8 tokens.
  const auto sample = torch::randint(0, eod, {2, m.seq_length + 1}, torch::kLong);
  sample[0][3] = eod;
  const auto inputs = sample.narrow(1, 0, m.seq_length), targets = sample.narrow(1, 1, m.seq_length);
  const PackedDocuments packed = packed_documents(inputs, eod);
  EXPECT_TRUE(torch::equal(packed.positions[0], torch::tensor({0, 1, 2, 3, 0, 1, 2, 3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(packed.ids[0], torch::tensor({0, 0, 0, 0, 1, 1, 1, 1}, torch::kLong)));
  const Documents documents{packed.ids, packed.positions};
  const auto mask = inputs.ne(eod);
  const auto a = inputs.narrow(0, 0, 1).narrow(1, 0, 3), a_targets = targets.narrow(0, 0, 1).narrow(1, 0, 3);
  const auto b = inputs.narrow(0, 0, 1).narrow(1, 4, 4), b_targets = targets.narrow(0, 0, 1).narrow(1, 4, 4);
  const auto whole = inputs.narrow(0, 1, 1), whole_targets = targets.narrow(0, 1, 1);
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    const auto model_for = [&] {
      GPT model(m, m.padded_vocab(), TensorParallel{}, Stage{}, mode);
      model->to(torch::kDouble);
      model->initialize(5);
      return model;
    };
    GPT together = model_for(), apart = model_for();
    {
      torch::NoGradGuard no_grad;
      const auto logits = together->forward(inputs, documents);
      const auto close = [](const torch::Tensor& x, const torch::Tensor& y) { return torch::allclose(x, y, 1e-12, 1e-12); };
      EXPECT_TRUE(close(logits[0].narrow(0, 0, 3), apart->forward(a)[0]));
      EXPECT_TRUE(close(logits[0].narrow(0, 4, 4), apart->forward(b)[0]));
      EXPECT_TRUE(close(logits[1], apart->forward(whole)[0]));
      EXPECT_FALSE(close(together->forward(inputs)[0].narrow(0, 4, 4), apart->forward(b)[0]))
          << "without documents the second document sees the first";
    }
    // Sums of per-token losses: the masked mean is over all 16 tokens.
    (together->loss(inputs, targets, documents, mask) * 16).backward();
    (apart->loss(a, a_targets) * 3 + apart->loss(b, b_targets) * 4 + apart->loss(whole, whole_targets) * 8).backward();
    auto separate = apart->named_parameters();
    for (const auto& item : together->named_parameters())
      EXPECT_TRUE(torch::allclose(item.value().grad(), separate[item.key()].grad(), 1e-11, 1e-12))
          << item.key() << " in recompute mode " << int(mode);
  }
}

INSTANTIATE_TEST_SUITE_P(Model, BothFamilies, ::testing::Values(tiny_model(), tiny_llama(), tiny_moe()),
                         [](const ::testing::TestParamInfo<ModelConfig>& info) { return family_name(info.param); });

namespace {

// Llama's forward written out head by head from the parameters, independently of the model's
// code: RMSNorm, rotary pairs (i, i + d/2) at angle p theta^(-2i/d), grouped-query attention
// reading the QKV rows group by group, SwiGLU, an untied head.
torch::Tensor reference_llama_logits(const ModelConfig& m, std::map<std::string, torch::Tensor> w,
                                     const torch::Tensor& ids) {
  const int64_t s = ids.size(1), h = m.hidden_size, a = m.num_attention_heads, g = m.query_groups(),
                d = m.head_dim(), r = a / g;
  auto rms = [&](const torch::Tensor& x, const std::string& name) {
    return x / (x.pow(2).mean(-1, true) + m.layernorm_epsilon).sqrt() * w.at(name + ".weight");
  };
  auto rotate = [&](const torch::Tensor& x) {  // [s, d]
    auto out = x.clone();
    for (int64_t p = 0; p < s; ++p)
      for (int64_t i = 0; i < d / 2; ++i) {
        const double angle = double(p) * std::pow(m.rope_theta, -2.0 * double(i) / double(d));
        const auto x1 = x[p][i], x2 = x[p][i + d / 2];
        out[p][i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        out[p][i + d / 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
    return out;
  };
  auto x = w.at("wte.weight").index_select(0, ids[0]);  // [s, h], one sequence
  const auto future = torch::ones({s, s}, torch::kBool).triu(1);
  for (int64_t layer = 0; layer < m.num_layers; ++layer) {
    const std::string L = "h" + std::to_string(layer) + ".";
    const auto qkv = torch::matmul(rms(x, L + "ln_1"), w.at(L + "attn.qkv.weight").t());  // [s, (a + 2g) d]
    std::vector<torch::Tensor> heads;
    for (int64_t head = 0; head < a; ++head) {
      const int64_t group = head / r, base = group * (r + 2) * d;
      const auto q = rotate(qkv.narrow(1, base + (head % r) * d, d));
      const auto k = rotate(qkv.narrow(1, base + r * d, d));
      const auto v = qkv.narrow(1, base + (r + 1) * d, d);
      const auto scores = torch::matmul(q, k.t()) / std::sqrt(double(d));
      heads.push_back(torch::matmul(scores.masked_fill(future, -INFINITY).softmax(-1), v));
    }
    x = x + torch::matmul(torch::cat(heads, 1), w.at(L + "attn.out.weight").t());
    const auto y = rms(x, L + "ln_2");
    const auto gate = torch::matmul(y, w.at(L + "mlp.gate.weight").t());
    const auto up = torch::matmul(y, w.at(L + "mlp.up.weight").t());
    x = x + torch::matmul(gate * torch::sigmoid(gate) * up, w.at(L + "mlp.down.weight").t());
  }
  return torch::matmul(rms(x, "ln_f"), w.at("lm_head.weight").t()).unsqueeze(0);
}

}  // namespace

TEST(Model, LlamaComputesWhatItsFormulasSay) {
  const ModelConfig m = tiny_llama();
  GPT model = make(m, torch::kDouble);
  std::map<std::string, torch::Tensor> weights;
  for (const auto& item : model->named_parameters()) weights[item.key()] = item.value().detach();
  // Llama has neither biases nor learned positions; the head is a matrix of its own.
  for (const char* absent : {"wpe.weight", "h0.attn.qkv.bias", "h0.mlp.up.bias", "h0.ln_1.bias"})
    EXPECT_EQ(weights.count(absent), 0u) << absent;
  EXPECT_FALSE(torch::equal(weights.at("lm_head.weight"), weights.at("wte.weight")));
  EXPECT_EQ(weights.at("h0.attn.qkv.weight").sizes(), torch::IntArrayRef({(4 + 2 * 2) * 4, 16}));
  auto ids = torch::randint(0, m.vocab_size, {1, m.seq_length}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(ids);
  const auto expected = reference_llama_logits(m, weights, ids);
  EXPECT_TRUE(torch::allclose(logits, expected, 1e-12, 1e-12)) << (logits - expected).abs().max();
}

// Llama 3.1's RoPE scaling in three bands of wavelength (2 pi / w): below 8192 / 4 kept, above
// 8192 slowed 8 times, between them blended; computed here from Meta's published rule.
TEST(Model, Llama3RopeScalingFollowsItsThreeBands) {
  ModelConfig m;
  m.hidden_size = 4096;
  m.num_attention_heads = 32;  // head size 128
  m.position_embedding_type = PositionEmbeddingType::rope;
  m.rope_theta = 500000;
  m.rope_scaling = RopeScaling::llama3;
  const auto [cos, sin] = Rotary(m).tables(torch::tensor({1.0}, torch::kDouble), torch::kDouble);
  int kept = 0, slowed = 0, blended = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double w = std::pow(500000.0, -2.0 * double(i) / 128), wavelength = 2 * M_PI / w;
    double expected = w;
    if (wavelength > 8192) {
      expected = w / 8, ++slowed;
    } else if (wavelength >= 2048) {
      const double smooth = (8192 / wavelength - 1) / (4 - 1);
      expected = (1 - smooth) * w / 8 + smooth * w, ++blended;
    } else {
      ++kept;
    }
    // At position 1 the angle is the frequency itself; both halves of the head share it.
    EXPECT_NEAR(std::atan2(sin[0][i].item<double>(), cos[0][i].item<double>()), expected, 1e-14) << i;
    EXPECT_EQ(cos[0][i].item<double>(), cos[0][i + 64].item<double>());
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(blended, 0);
}


// RMSNorm's own backward (model/layers.cpp) gives the gradients autograd computes for its formula,
// in fp64 to rounding and in bf16 (computed in fp32 inside) to bf16's precision.
TEST(Model, RmsNormBackwardIsTheFormulasGradient) {
  for (const auto dtype : {torch::kDouble, torch::kBFloat16}) {
    SCOPED_TRACE(dtype == torch::kDouble ? "fp64" : "bf16");
    Norm norm(Normalization::rmsnorm, 16, 1e-5, TensorParallel{});
    norm->to(dtype);
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::randn({16}, torch::kDouble).to(dtype));
    const auto input = torch::randn({3, 5, 16}, torch::kDouble).to(dtype);
    const auto upstream = torch::randn({3, 5, 16}, torch::kDouble).to(dtype);
    auto grads_of = [&](bool formula) {
      torch::AutoGradMode enabled(true);
      auto x = input.clone().requires_grad_(true);
      auto w = norm->weight.detach().clone().requires_grad_(true);
      torch::Tensor y;
      if (formula) {
        const auto wide = dtype == torch::kDouble ? x : x.to(torch::kFloat);
        y = w * (wide * torch::rsqrt(wide.pow(2).mean(-1, true) + 1e-5)).to(dtype);
      } else {
        norm->weight.set_data(w);
        y = norm(x);
      }
      (y * upstream).sum().backward();
      return std::pair{x.grad().to(torch::kDouble), (formula ? w.grad() : norm->weight.grad()).to(torch::kDouble)};
    };
    const auto [x_formula, w_formula] = grads_of(true);
    const auto [x_own, w_own] = grads_of(false);
    const double tolerance = dtype == torch::kDouble ? 1e-12 : 2e-2;
    EXPECT_TRUE(torch::allclose(x_own, x_formula, tolerance, tolerance)) << (x_own - x_formula).abs().max();
    EXPECT_TRUE(torch::allclose(w_own, w_formula, tolerance, tolerance)) << (w_own - w_formula).abs().max();
  }
}

// A block's auxiliary loss: its gradient joins the output's at coefficient x the iteration's
// backward scale, it is recorded only where gradients are taken, and mistakes are named.
TEST(AuxiliaryLoss, AddsItsGradientAndRecordsWhereGradientsAreTaken) {
  using trident::testing::error_of;
  static const bool declared = (declare_auxiliary_loss("unit_penalty"), true);
  (void)declared;
  const auto names = declared_auxiliary_losses();
  const int64_t at = std::find(names.begin(), names.end(), "unit_penalty") - names.begin();
  AuxiliaryLosses auxiliary;
  auxiliary.begin_iteration(0.5);
  const torch::Tensor x = torch::randn({3, 4}, torch::kDouble).requires_grad_();
  const torch::Tensor y = auxiliary.add(x * 2, "unit_penalty", x.square().sum(), 0.1);
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), 2 + 0.1 * 0.5 * 2 * x.detach(), 1e-12, 1e-12));
  const double penalty = 0.1 * x.square().sum().item<double>();
  EXPECT_NEAR(auxiliary.values()[at].item<double>(), penalty, 1e-12);
  {
    torch::NoGradGuard no_grad;  // validation, or recompute=full's first pass
    EXPECT_TRUE(auxiliary.add(x, "unit_penalty", x.square().sum(), 0.1).is_same(x));
  }
  EXPECT_NEAR(auxiliary.values()[at].item<double>(), penalty, 1e-12);
  auxiliary.begin_iteration(1.0);
  EXPECT_FALSE(auxiliary.values().defined());

  EXPECT_NE(error_of([&] { auxiliary.add(x, "undeclared", x.sum(), 1.0); })
                .find("auxiliary loss 'undeclared' was not declared: call trident::declare_auxiliary_loss"),
            std::string::npos);
  EXPECT_NE(error_of([&] { auxiliary.add(x, "unit_penalty", x, 1.0); }).find("must be a floating-point scalar"),
            std::string::npos);
  EXPECT_NE(error_of([] { declare_auxiliary_loss("a/b"); }).find("must be letters, digits and '_'"), std::string::npos);
  EXPECT_NE(error_of([] { declare_auxiliary_loss("unit_penalty"); }).find("is declared already"), std::string::npos);
}
