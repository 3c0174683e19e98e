// The fused CUDA kernels (model/fused_kernels.h) against the composite LibTorch path they
// replace, forward and backward, through the same modules with model.fused_kernels on and off;
// then whole training runs. They need a GPU and a build with the kernels, and skip elsewhere
// (scripts/gpu_report runs them on a GPU).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <functional>

#include "model/expert_multiply.h"
#include "model/fused_kernels.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "model/rotary.h"
#include "tests/helpers.h"
#include "train/trainer.h"

using namespace trident;
using trident::testing::scratch_dir;
using trident::testing::tiny_llama;
using trident::testing::write_documents;

namespace {

#define TRIDENT_SKIP_WITHOUT_KERNELS()                                                        \
  if (!torch::cuda::is_available() || !fused::built())                                        \
  GTEST_SKIP() << "needs a GPU and a build with the fused kernels (" << (fused::built() ? "" : "not ") \
               << "built here)"

using Inputs = std::vector<torch::Tensor>;
using Function = std::function<Inputs(const Inputs&)>;

struct Result {
  Inputs outputs, grads;
};

// f's outputs on fresh leaf copies of `inputs`, and the inputs' gradients of the sum of the
// outputs weighted by random gradients (the same for both paths: one seed).
Result run(const Function& f, const Inputs& inputs) {
  Inputs leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().clone().requires_grad_(t.is_floating_point()));
  Result r;
  r.outputs = f(leaves);
  torch::manual_seed(7);
  auto total = torch::zeros({}, inputs[0].options().dtype(torch::kFloat));
  // Drawn in the outputs' logical order: the two paths may lay their outputs out differently.
  for (const auto& o : r.outputs)
    total = total + (o.to(torch::kFloat) * torch::randn(o.sizes(), o.options().dtype(torch::kFloat))).sum();
  total.backward();
  for (const auto& leaf : leaves)
    if (leaf.is_floating_point()) r.grads.push_back(leaf.grad());
  return r;
}

// The largest difference relative to the largest magnitude of the composite result.
double difference(const torch::Tensor& fused, const torch::Tensor& composite) {
  const auto a = fused.to(torch::kDouble), b = composite.to(torch::kDouble);
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

// Tolerances: fp32's, and bf16's, whose composite path rounds after every op where the kernel
// rounds once.
double tolerance(torch::Dtype type) { return type == torch::kFloat ? 1e-5 : 2e-2; }

void expect_same(const Function& fused, const Function& composite, const Inputs& inputs, const std::string& what) {
  const Result a = run(fused, inputs), b = run(composite, inputs);
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  ASSERT_EQ(a.grads.size(), b.grads.size());
  const double tol = tolerance(inputs[0].scalar_type());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_EQ(a.outputs[i].sizes(), b.outputs[i].sizes()) << what;
    EXPECT_EQ(a.outputs[i].scalar_type(), b.outputs[i].scalar_type()) << what;
    EXPECT_LT(difference(a.outputs[i], b.outputs[i]), tol) << what << ": output " << i;
  }
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_TRUE(a.grads[i].defined() && b.grads[i].defined()) << what << ": gradient " << i;
    EXPECT_LT(difference(a.grads[i], b.grads[i]), tol) << what << ": gradient of input " << i;
  }
}

const torch::Dtype kTypes[] = {torch::kFloat, torch::kBFloat16};

torch::Tensor random(torch::IntArrayRef sizes, torch::Dtype type) {
  return torch::randn(sizes, torch::TensorOptions().device(torch::kCUDA)).to(type);
}

}  // namespace

// LayerNorm and RMSNorm, alone and after the residual add, over rows shorter than a block and
// rows that leave a block's last pass partly idle; the weights' gradients too.
TEST(FusedKernels, NormsMatchTheCompositePath) {
  TRIDENT_SKIP_WITHOUT_KERNELS();
  for (const auto type : kTypes)
    for (const auto kind : {Normalization::layernorm, Normalization::rmsnorm})
      for (const int64_t hidden : {20, 2304}) {
        const std::string what = trident::str(kind, " of ", hidden, " in ", type);
        const bool centered = kind == Normalization::layernorm;
        // Inputs: x, delta, then the weight and (LayerNorm) the bias, set as the module's own
        // so that their gradients are compared too.
        const auto with = [&](bool fused_kernels, bool add) -> Function {
          return [=](const Inputs& in) {
            Norm norm(kind, hidden, 1e-5, TensorParallel{}, fused_kernels);
            norm->weight = in[2];
            if (centered) norm->bias = in[3];
            if (!add) return Inputs{norm->forward(in[0]), in[1] * 0};  // delta unused: a zero gradient
            const auto [sum, y] = norm->add_then_forward(in[0], in[1]);
            return Inputs{sum, y};
          };
        };
        Inputs inputs = {random({3, 7, hidden}, type) * 3 + 1, random({3, 7, hidden}, type), random({hidden}, type)};
        if (centered) inputs.push_back(random({hidden}, type));
        expect_same(with(true, false), with(false, false), inputs, what);
        expect_same(with(true, true), with(false, true), inputs, what + " after an add");
      }
}

TEST(FusedKernels, ActivationsMatchTheCompositePath) {
  TRIDENT_SKIP_WITHOUT_KERNELS();
  for (const auto type : kTypes) {
    const Inputs two = {random({5, 333}, type) * 3, random({5, 333}, type)};
    expect_same([](const Inputs& in) { return Inputs{fused::swiglu(in[0], in[1])}; },
                [](const Inputs& in) { return Inputs{at::silu(in[0]) * in[1]}; }, two, trident::str("SwiGLU in ", type));
    expect_same([](const Inputs& in) { return Inputs{fused::gelu(in[0])}; },
                [](const Inputs& in) { return Inputs{at::gelu(in[0], "tanh")}; }, {two[0]}, trident::str("GELU in ", type));
    // Views that start one element past an aligned address: the kernels' element-at-a-time path.
    const auto unaligned = [](const torch::Tensor& t) {
      return torch::cat({t.new_zeros({1}), t.flatten()}).narrow(0, 1, t.numel()).view(t.sizes());
    };
    expect_same([&](const Inputs& in) { return Inputs{fused::swiglu(unaligned(in[0]), unaligned(in[1]))}; },
                [](const Inputs& in) { return Inputs{at::silu(in[0]) * in[1]}; }, two,
                trident::str("SwiGLU of unaligned views in ", type));
    expect_same([&](const Inputs& in) { return Inputs{fused::gelu(unaligned(in[0]))}; },
                [](const Inputs& in) { return Inputs{at::gelu(in[0], "tanh")}; }, {two[0]},
                trident::str("GELU of an unaligned view in ", type));
  }
}

// The experts' grouped multiply (model/expert_multiply.h) against a multiply per expert, in
// bf16 on CUDA: runs of uneven lengths, an empty one and one past the 16-row alignment; the
// weights' gradients too.
TEST(FusedKernels, GroupedExpertMultiplyMatchesTheLoop) {
  if (!torch::cuda::is_available() || !grouped_multiply_built() ||
      fused::compute_capability(torch::zeros({1}, torch::kCUDA)) != 9)
    GTEST_SKIP() << "needs a Hopper GPU and a LibTorch with the grouped multiply (" << (grouped_multiply_built() ? "" : "not ")
                 << "in this one)";
  const std::vector<int64_t> counts = {5, 0, 37, 16};
  const Inputs inputs = {random({58, 64}, torch::kBFloat16), random({4, 96, 64}, torch::kBFloat16)};
  const auto with = [&](bool grouped) -> Function {
    return [=](const Inputs& in) { return Inputs{expert_multiply(in[0], in[1], counts, grouped)}; };
  };
  expect_same(with(true), with(false), inputs, "grouped expert multiply");
}

// Queries as the attention hands them over (a transposed view of the projection), by tables of
// one sequence and by tables of each sample's own positions (packed documents).
TEST(FusedKernels, RotaryMatchesTheCompositePath) {
  TRIDENT_SKIP_WITHOUT_KERNELS();
  ModelConfig m = tiny_llama();
  m.hidden_size = 256, m.num_attention_heads = 4;  // head_dim 64
  const Rotary rotary(m);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong);
  for (const auto type : kTypes)
    for (const bool per_sample : {false, true}) {
      const auto positions = per_sample ? torch::randint(0, 100, {2, 9}, cuda) : torch::arange(3, 12, cuda);
      const auto tables = rotary.tables(positions, type);
      const auto with = [&](bool fused_kernels) -> Function {
        return [=](const Inputs& in) { return Inputs{Rotary::rotate(in[0].transpose(1, 2), tables, fused_kernels)}; };
      };
      expect_same(with(true), with(false), {random({2, 9, 4, 64}, type)},
                  trident::str("rotary in ", type, per_sample ? " per sample" : ""));
    }
}

// The loss from bf16 logits without their fp32 copy equals LibTorch's cross-entropy of the fp32
// copy; a nan logit gives a nan loss (the divergence guard's signal), and so does a target
// outside the vocabulary.
TEST(FusedKernels, CrossEntropyMatchesTheCompositePath) {
  TRIDENT_SKIP_WITHOUT_KERNELS();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong);
  for (const auto type : kTypes)
    for (const int64_t vocab : {100, 51200}) {
      const auto targets = torch::randint(0, vocab, {37}, cuda);
      expect_same([&](const Inputs& in) { return Inputs{fused::cross_entropy(in[0], targets)}; },
                  [&](const Inputs& in) {
                    return Inputs{at::cross_entropy_loss(in[0].to(torch::kFloat), targets, {}, at::Reduction::None)};
                  },
                  {random({37, vocab}, type) * 4}, trident::str("cross-entropy over ", vocab, " in ", type));
    }
  auto logits = random({3, 100}, torch::kBFloat16);
  logits[1][5] = std::numeric_limits<float>::quiet_NaN();
  const auto losses = fused::cross_entropy(logits, torch::tensor({1, 2, 100}, cuda)).cpu();
  EXPECT_FALSE(std::isnan(losses[0].item<float>()));
  EXPECT_TRUE(std::isnan(losses[1].item<float>()));
  EXPECT_TRUE(std::isnan(losses[2].item<float>()));
}

// Whole runs of both families on the GPU: fp32 losses equal the composite path's to rounding,
// bf16's track them.
TEST(FusedKernels, TrainingTracksTheCompositePath) {
  TRIDENT_SKIP_WITHOUT_KERNELS();
  const auto dir = scratch_dir();
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i) documents.push_back(i % 3 ? "the quick brown fox jumps over the lazy dog. " : "pack my box. ");
  const std::string data = (dir / "corpus").string();
  write_documents(data, documents);
  const auto losses = [&](const std::vector<std::string>& settings) {
    std::vector<std::string> all = {"data.path=" + data, "model.num_layers=2", "model.hidden_size=64",
                                    "model.num_attention_heads=4", "model.seq_length=32", "batch.micro_batch_size=4",
                                    "batch.global_batch_size=8", "optimizer.lr=5e-3", "optimizer.warmup_iters=2",
                                    "train.log_interval=1000", "train.iters=20", "train.device=cuda"};
    all.insert(all.end(), settings.begin(), settings.end());
    Trainer trainer(Config::parse("", all));
    return trident::testing::training_losses(trainer);
  };
  const std::vector<std::string> llama = {"model.normalization=rmsnorm", "model.position_embedding_type=rope",
                                          "model.activation=swiglu", "model.num_query_groups=2",
                                          "model.add_bias_linear=false", "model.untie_embeddings_and_output_weights=true"};
  for (const bool is_llama : {false, true})
    for (const std::string precision : {"fp32", "bf16"}) {
      std::vector<std::string> settings = is_llama ? llama : std::vector<std::string>{"model.hidden_dropout=0.1"};
      settings.push_back("precision=" + precision);
      auto composite_settings = settings;
      composite_settings.push_back("model.fused_kernels=false");
      const auto fused = losses(settings), composite = losses(composite_settings);
      ASSERT_EQ(fused.size(), composite.size());
      double worst = 0;
      for (size_t i = 0; i < fused.size(); ++i) worst = std::max(worst, std::abs(fused[i] - composite[i]) / composite[i]);
      std::printf("%s %s: fused vs composite, worst relative loss difference %.2e, final %.4f vs %.4f\n",
                  is_llama ? "llama" : "gpt", precision.c_str(), worst, fused.back(), composite.back());
      EXPECT_LT(worst, precision == "fp32" ? 1e-4 : 3e-2) << (is_llama ? "llama " : "gpt ") << precision;
      EXPECT_LT(fused.back(), 0.7 * fused.front());
    }
}
