// FP8 multiplies (parallel/fp8_multiply.h, precision=fp8). The casts against the formats' own
// rounding; the linear layer against the fp32 multiply of its dequantised operands (the
// emulation: the same quantisation, written here with LibTorch's 8-bit types); training against
// bf16. On the CPU (LibTorch's scaled multiply and the casts by its ops) and, where there is one,
// on a GPU (the CUDA cast kernel, cuBLAS's FP8 multiply).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/error.h"
#include "parallel/fp8_multiply.h"
#include "tests/helpers.h"
#include "train/trainer.h"

#if __has_include(<ATen/ops/_scaled_mm.h>)
#define TRIDENT_TEST_FP8 1  // this LibTorch has the 8-bit types the emulation uses
#endif

using namespace trident;
using trident::testing::scratch_dir;
using trident::testing::write_documents;

#ifdef TRIDENT_TEST_FP8
namespace {

#define TRIDENT_SKIP_WITHOUT_FP8() \
  if (!fp8::built()) GTEST_SKIP() << "needs LibTorch 2.x (8-bit floats)"

// The CPU, and the GPU where there is one that has FP8 tensor cores.
std::vector<torch::Device> devices() {
  std::vector<torch::Device> out = {torch::kCPU};
  if (torch::cuda::is_available()) out.emplace_back(torch::kCUDA);
  return out;
}

// x quantised by the emulation: scale = max / amax, x * scale clamped to the format's range and
// rounded by LibTorch's conversion to the 8-bit type; returned dequantised (fp32).
torch::Tensor emulated(const torch::Tensor& x, fp8::Format format) {
  const double max = format == fp8::Format::e4m3 ? 448.0 : 57344.0;
  const auto type = format == fp8::Format::e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
  const auto x32 = x.to(torch::kFloat).cpu();
  const auto scale = max / x32.abs().max().clamp_min(1e-12);
  return (x32 * scale).clamp(-max, max).to(type).to(torch::kFloat) / scale;
}

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.to(torch::kDouble).cpu(), y = b.to(torch::kDouble).cpu();
  return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), 1e-30);
}

}  // namespace

// Values whose e4m3 rounding is known: a tie goes to the even mantissa (1.0625 -> 1, 1.1875 ->
// 1.25), 3.3 to the nearer 3.25, 0.001 to the smallest subnormal 2^-9; with a scale that takes
// 448 past the range, saturation at 448 (not nan).
TEST(Fp8, CastRoundsToNearestEvenAndSaturates) {
  TRIDENT_SKIP_WITHOUT_FP8();
  for (const auto& device : devices()) {
    const auto x =
        torch::tensor({448.f, 1.0625f, 1.1875f, -3.3f, 0.001f, 0.f, 32.f, -448.f}).reshape({2, 4}).to(device);
    const auto q = fp8::quantise(x, fp8::Format::e4m3, true, true);
    EXPECT_FLOAT_EQ(q.scale.item<float>(), 1.f) << device;
    const auto expected = torch::tensor({448.f, 1.f, 1.25f, -3.25f, 0.001953125f, 0.f, 32.f, -448.f}).reshape({2, 4});
    EXPECT_TRUE(torch::equal(q.rows.to(torch::kFloat).cpu(), expected)) << device << ": " << q.rows.to(torch::kFloat);
    EXPECT_TRUE(torch::equal(q.transposed.to(torch::kFloat).cpu(), expected.t())) << device;
    const auto doubled = fp8::quantise_with(x, torch::full({}, 2.f, x.options()), fp8::Format::e4m3, true, false);
    EXPECT_EQ(doubled.rows.to(torch::kFloat).cpu()[0][0].item<float>(), 448.f) << device;
    EXPECT_FALSE(doubled.transposed.defined());
    const auto e5m2 = fp8::quantise_with(x, torch::full({}, 1000.f, x.options()), fp8::Format::e5m2, true, false);
    EXPECT_EQ(e5m2.rows.to(torch::kFloat).cpu()[0][0].item<float>(), 57344.f) << device;
  }
}

// The CUDA kernel writes the bytes LibTorch's ops write on the CPU, both layouts, for each
// input type and shapes that leave tiles partly filled: one whose sizes are not multiples of 8
// (an element per thread) and two that are (8 at once: a whole tile, and parts of tiles).
TEST(Fp8, CastKernelWritesTheBytesOfTheCpuPath) {
  TRIDENT_SKIP_WITHOUT_FP8();
  if (!torch::cuda::is_available() || !fp8::cast_kernel_applies(torch::zeros({1}, torch::kCUDA)))
    GTEST_SKIP() << "needs a GPU and a build with the CUDA cast";
  torch::manual_seed(3);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{70, 50}, {128, 64}, {200, 72}})
    for (const auto type : {torch::kFloat, torch::kHalf, torch::kBFloat16})
      for (const auto format : {fp8::Format::e4m3, fp8::Format::e5m2}) {
        const auto x = (torch::randn({rows, cols}) * 3).to(type);
        const auto gpu = fp8::quantise(x.cuda(), format, true, true), cpu = fp8::quantise(x, format, true, true);
        const std::string what = std::to_string(rows) + " x " + std::to_string(cols) + " " + c10::toString(type);
        EXPECT_TRUE(torch::equal(gpu.scale.cpu(), cpu.scale)) << what;
        EXPECT_TRUE(torch::equal(gpu.rows.cpu().view(torch::kUInt8), cpu.rows.view(torch::kUInt8))) << what;
        EXPECT_TRUE(torch::equal(gpu.transposed.cpu().view(torch::kUInt8), cpu.transposed.view(torch::kUInt8))) << what;
        const auto alone = fp8::quantise(x.cuda(), format, false, true);  // the transposed copy alone
        EXPECT_TRUE(torch::equal(alone.transposed.cpu().view(torch::kUInt8), cpu.transposed.view(torch::kUInt8)))
            << what;
      }
}

// Y = X W^T + b and its three gradients equal the multiplies of the emulated operands: X and W
// in e4m3, the output's gradient in e5m2, fp32 products. fp32 inputs on the CPU (to fp32's
// rounding), bf16 on a GPU (to bf16's).
TEST(Fp8, LinearEqualsTheMultiplyOfItsQuantisedOperands) {
  TRIDENT_SKIP_WITHOUT_FP8();
  for (const auto& device : devices()) {
    const auto type = device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
    torch::manual_seed(5);
    const auto options = torch::TensorOptions().dtype(type).device(device);
    const auto x = torch::randn({2, 24, 32}, options).requires_grad_(),
               w = (torch::randn({48, 32}, options) * 0.2).requires_grad_(),
               b = torch::randn({48}, options).requires_grad_();
    const auto y = fp8::linear(x, w, b);
    const auto g = torch::randn(y.sizes(), options) * 1e-3;
    y.backward(g);

    const auto qx = emulated(x.detach().reshape({-1, 32}), fp8::Format::e4m3),
               qw = emulated(w.detach(), fp8::Format::e4m3), qg = emulated(g.reshape({-1, 48}), fp8::Format::e5m2);
    const auto y_expected = (qx.matmul(qw.t()) + b.detach().to(torch::kFloat).cpu()).reshape({2, 24, 48});
    const double tol = type == torch::kFloat ? 1e-5 : 1e-2;
    EXPECT_EQ(y.scalar_type(), type);
    EXPECT_LT(relative_difference(y, y_expected), tol) << device << ": output";
    EXPECT_LT(relative_difference(x.grad(), qg.matmul(qw).reshape({2, 24, 32})), tol) << device << ": input's gradient";
    EXPECT_LT(relative_difference(w.grad(), qg.t().matmul(qx)), tol) << device << ": weight's gradient";
    EXPECT_LT(relative_difference(b.grad(), g.reshape({-1, 48}).to(torch::kFloat).sum(0)), tol)
        << device << ": bias' gradient";
    EXPECT_EQ(w.grad().scalar_type(), type);
  }
}

// Layers that take the same input (SwiGLU's gate and up) cast it once and give what each layer
// gives alone: the same outputs, weight and bias gradients, and the sum of the input's gradients.
TEST(Fp8, LinearsSharingAnInputEqualTheLinearsApart) {
  TRIDENT_SKIP_WITHOUT_FP8();
  for (const auto& device : devices()) {
    const auto type = device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
    torch::manual_seed(6);
    const auto options = torch::TensorOptions().dtype(type).device(device);
    const auto x = torch::randn({2, 16, 32}, options);
    const auto w1 = torch::randn({48, 32}, options) * 0.2, w2 = torch::randn({16, 32}, options),
               b1 = torch::randn({48}, options), b2 = torch::randn({16}, options);
    const auto g1 = torch::randn({2, 16, 48}, options) * 1e-3, g2 = torch::randn({2, 16, 16}, options);
    auto leaves = [](const std::vector<torch::Tensor>& ts) {
      std::vector<torch::Tensor> out;
      for (const auto& t : ts) out.push_back(t.detach().clone().requires_grad_());
      return out;
    };
    const auto shared = leaves({x, w1, w2, b1, b2}), apart = leaves({x, w1, w2, b1, b2});
    const auto together = fp8::linears(shared[0], {shared[1], shared[2]}, {shared[3], shared[4]});
    torch::autograd::backward(together, {g1, g2});
    const auto y1 = fp8::linear(apart[0], apart[1], apart[3]), y2 = fp8::linear(apart[0], apart[2], apart[4]);
    torch::autograd::backward({y1, y2}, {g1, g2});
    ASSERT_EQ(together.size(), 2u);
    EXPECT_TRUE(torch::equal(together[0], y1)) << device;
    EXPECT_TRUE(torch::equal(together[1], y2)) << device;
    for (size_t i = 0; i < shared.size(); ++i)
      EXPECT_TRUE(torch::allclose(shared[i].grad(), apart[i].grad(), 1e-6, 0)) << device << ": gradient " << i;
  }
}

// A multiply whose sizes cuBLAS's FP8 kernels cannot take is one error naming the sizes and what
// decides them, on every device alike.
TEST(Fp8, SizesNotMultiplesOf16AreOneClearError) {
  TRIDENT_SKIP_WITHOUT_FP8();
  const auto x = torch::randn({10, 32}), w = torch::randn({48, 32});
  try {
    fp8::linear(x, w, torch::Tensor());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("10 rows of 32 inputs into 48 outputs"), std::string::npos) << message;
    EXPECT_NE(message.find("multiple of 16"), std::string::npos) << message;
    EXPECT_NE(message.find("batch.micro_batch_size"), std::string::npos) << message;
  }
}

// Training a GPT and a Llama with precision=fp8 follows bf16: the losses of 30 iterations on text
// within 5% of bf16's at each iteration, and falling as much. On the GPU where there is one, else
// on the CPU.
TEST(Fp8, TrainingTracksBf16) {
  TRIDENT_SKIP_WITHOUT_FP8();
  const auto dir = scratch_dir();
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i)
    documents.push_back(i % 3 ? "the quick brown fox jumps over the lazy dog. " : "pack my box. ");
  const std::string data = (dir / "corpus").string();
  write_documents(data, documents);
  const std::string device = torch::cuda::is_available() ? "cuda" : "cpu";
  const auto losses = [&](bool llama, const std::string& precision) {
    std::vector<std::string> all = {"data.path=" + data,           "model.num_layers=2",  "model.hidden_size=64",
                                    "model.num_attention_heads=4", "model.seq_length=32", "batch.micro_batch_size=4",
                                    "batch.global_batch_size=8",   "optimizer.lr=5e-3",   "optimizer.warmup_iters=2",
                                    "train.log_interval=1000",     "train.iters=30",      "train.device=" + device,
                                    "precision=" + precision};
    if (llama)
      for (const char* s : {"model.normalization=rmsnorm", "model.position_embedding_type=rope",
                            "model.activation=swiglu", "model.num_query_groups=2", "model.add_bias_linear=false"})
        all.emplace_back(s);
    Trainer trainer(Config::parse("", all));
    return trident::testing::training_losses(trainer);
  };
  for (const bool llama : {false, true}) {
    const auto fp8 = losses(llama, "fp8"), bf16 = losses(llama, "bf16");
    ASSERT_EQ(fp8.size(), bf16.size());
    double worst = 0, mean = 0;
    for (size_t i = 0; i < fp8.size(); ++i) {
      const double d = std::abs(fp8[i] - bf16[i]) / bf16[i];
      worst = std::max(worst, d);
      mean += d / double(fp8.size());
    }
    std::printf("%s on %s: fp8 vs bf16, relative loss difference mean %.2e, worst %.2e, final %.4f vs %.4f\n",
                llama ? "llama" : "gpt", device.c_str(), mean, worst, fp8.back(), bf16.back());
    EXPECT_LT(mean, 0.05) << (llama ? "llama" : "gpt");
    EXPECT_LT(fp8.back(), 0.7 * fp8.front());
  }
}

#endif

// A LibTorch without 8-bit floats (1.13) refuses precision=fp8 before any work, naming it.
TEST(Fp8, ALibTorchWithoutFp8RefusesIt) {
  if (fp8::built()) GTEST_SKIP() << "this LibTorch has FP8";
  try {
    Trainer trainer(Config::parse("", {"precision=fp8", "data.type=synthetic", "model.num_layers=1", "train.iters=1"}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision=fp8 needs LibTorch 2.x"), std::string::npos) << e.what();
  }
}
