// The pieces of the ZeRO optimizer that need no communication: the flat buckets, the AdamW
// update against LibTorch's own, the state memory per ZeRO stage, and the loss scaler.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/zero.h"
#include "parallel/data_parallel.h"
#include "parallel/flat_buckets.h"
#include "parallel/linear_multiply.h"
#include "parallel/split_backward.h"
#include "tests/helpers.h"

using namespace trident;
using trident::testing::FakeGroup;

TEST(FlatBuckets, BucketsArePaddedAndRanksSlicesCoverEveryElementOnce) {
  const std::vector<int64_t> numels = {300, 7, 500, 70, 1};
  for (int64_t shards : {1, 2, 3, 4}) {
    SCOPED_TRACE(shards);
    const FlatBuckets flat = make_flat_buckets(numels, 400, shards, {0, 0, 1, 0, 0});
    int64_t start = 0, shard_start = 0;
    for (const auto& bucket : flat.buckets) {
      EXPECT_EQ(bucket.start, start);
      EXPECT_EQ(bucket.numel % shards, 0);
      EXPECT_EQ(bucket.shard_start, shard_start);
      start += bucket.numel;
      shard_start += bucket.numel / shards;
    }
    EXPECT_EQ(flat.total, start);
    EXPECT_EQ(flat.shard_numel() * shards, flat.total);
    // Reverse order: {1, 70} close at 71 < 400, then group 1's 500 alone, then {7, 300}.
    ASSERT_EQ(flat.buckets.size(), 3u);
    EXPECT_EQ(flat.buckets[0].params, (std::vector<size_t>{4, 3}));
    EXPECT_EQ(flat.buckets[1].params, std::vector<size_t>{2});
    EXPECT_EQ(flat.buckets[2].params, (std::vector<size_t>{1, 0}));
    std::vector<int64_t> seen(numels.size(), 0);
    for (int64_t rank = 0; rank < shards; ++rank)
      for (const auto& s : flat.segments(rank)) {
        EXPECT_EQ(flat.slice_start(s.bucket, rank) + s.slice_offset, flat.offset[s.param] + s.param_offset);
        EXPECT_LE(s.slice_offset + s.numel, flat.slice_numel(s.bucket));
        seen[s.param] += s.numel;
      }
    EXPECT_EQ(seen, numels);
  }
}

// ZeRO-3's units: a bucket never mixes groups, and a group that comes back after another (the
// rest of a chunk: embeddings before the blocks, final LayerNorm after) opens a new bucket.
TEST(FlatBuckets, ABucketHoldsOneGroup) {
  const FlatBuckets flat = make_flat_buckets({10, 20, 30, 40, 50}, int64_t(1) << 40, 2, {-1, 0, 0, 1, -1});
  ASSERT_EQ(flat.buckets.size(), 4u);
  EXPECT_EQ(flat.buckets[0].params, std::vector<size_t>{4});
  EXPECT_EQ(flat.buckets[1].params, std::vector<size_t>{3});
  EXPECT_EQ(flat.buckets[2].params, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(flat.buckets[3].params, std::vector<size_t>{0});
}

TEST(AdamW, FlatUpdateEqualsLibTorchAdamW) {
  torch::manual_seed(0);
  OptimizerConfig config;
  config.weight_decay = 0.1;
  const double lr = 1e-2;
  auto matrix = torch::randn({5, 4}, torch::kDouble), bias = torch::randn({4}, torch::kDouble);
  auto theirs_matrix = matrix.clone().requires_grad_(), theirs_bias = bias.clone().requires_grad_();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto options = [&](double decay) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr)
                                                            .betas({config.beta1, config.beta2})
                                                            .eps(config.eps)
                                                            .weight_decay(decay));
  };
  groups.emplace_back(std::vector<torch::Tensor>{theirs_matrix}, options(config.weight_decay));
  groups.emplace_back(std::vector<torch::Tensor>{theirs_bias}, options(0.0));
  torch::optim::AdamW theirs(std::move(groups));

  // Ours: both in one flat slice, the matrix's run decaying.
  auto flat = torch::cat({matrix.view(-1), bias});
  auto grad = torch::zeros_like(flat);
  std::vector<AdamWSlice> slices = {
      {flat, grad, torch::zeros_like(flat), torch::zeros_like(flat), {{0, 20, true}, {20, 4, false}}}};
  for (int64_t step = 1; step <= 5; ++step) {
    auto g = torch::randn({24}, torch::kDouble);
    grad.copy_(g);
    theirs_matrix.mutable_grad() = g.narrow(0, 0, 20).view({5, 4}).clone();
    theirs_bias.mutable_grad() = g.narrow(0, 20, 4).clone();
    theirs.step();
    adamw_update(slices, config, lr, step);
  }
  EXPECT_TRUE(torch::allclose(flat.narrow(0, 0, 20), theirs_matrix.detach().view(-1), 1e-14, 1e-14));
  EXPECT_TRUE(torch::allclose(flat.narrow(0, 20, 4), theirs_bias.detach(), 1e-14, 1e-14));
}

// LibTorch 2.x's fused CUDA kernel (used on GPUs) computes the same update as the flat one.
TEST(AdamW, FusedCudaUpdateEqualsTheFlatOne) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(0);
  OptimizerConfig config;
  auto make = [](const torch::Device& device) {
    auto t = [&](int64_t n) { return torch::zeros({n}, torch::TensorOptions().device(device)); };
    return AdamWSlice{t(1000), t(1000), t(1000), t(1000), {{0, 600, true}, {600, 390, false}}};
  };
  std::vector<AdamWSlice> cpu = {make(torch::kCPU)}, gpu = {make(torch::kCUDA)};
  const auto start = torch::randn({1000});
  cpu[0].param.copy_(start), gpu[0].param.copy_(start);
  for (int64_t step = 1; step <= 5; ++step) {
    const auto g = torch::randn({1000});
    cpu[0].grad.copy_(g), gpu[0].grad.copy_(g);
    adamw_update(cpu, config, 1e-2, step);
    adamw_update(gpu, config, 1e-2, step);
  }
  EXPECT_TRUE(torch::allclose(gpu[0].param.cpu().narrow(0, 0, 990), cpu[0].param.narrow(0, 0, 990), 1e-5, 1e-6));
  EXPECT_FALSE(torch::equal(cpu[0].param, start));
}

// Bytes per parameter of each state, by stage, for a data-parallel group of 4 (no
// communication happens while the optimizer is built).
TEST(ZeroOptimizer, ShardedStatesShrinkByTheDataParallelSize) {
  const int64_t d = 4;
  auto memory = [&](int64_t stage, torch::Dtype dtype) {
    std::vector<RoledParameter> params = {{"w", torch::zeros({64, 32}, dtype).requires_grad_(), ParameterRole::whole()},
                                          {"b", torch::zeros({32}, dtype).requires_grad_(), ParameterRole::whole()}};
    FakeGroup group(1, int(d));
    ZeroOptions options;
    options.stage = stage;
    options.main_dtype = torch::kFloat;
    options.units = {0, 0};
    ZeroOptimizer optimizer(params, group, OptimizerConfig{}, options);
    return optimizer.memory();
  };
  const int64_t n = 64 * 32 + 32;  // divisible by 4: no padding
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(dtype);
    const int64_t weight = dtype == torch::kFloat ? 4 : 2;
    const int64_t optimizer = dtype == torch::kFloat ? 8 : 12;  // + fp32 main copy when mixed
    const StateMemory stage0 = memory(0, dtype), stage1 = memory(1, dtype), stage2 = memory(2, dtype),
                      stage3 = memory(3, dtype);
    for (const auto& m : {stage0, stage1, stage2}) EXPECT_EQ(m.weights, weight * n);
    EXPECT_EQ(stage0.grads, 4 * n);
    EXPECT_EQ(stage0.optimizer, optimizer * n);
    EXPECT_EQ(stage1.optimizer, optimizer * n / d);
    EXPECT_EQ(stage1.grads, 4 * n + 4 * n / d);  // the whole buffer and the reduce-scatter's slice
    EXPECT_EQ(stage2.optimizer, optimizer * n / d);
    EXPECT_EQ(stage2.grads, 4 * n / d);
    // Stage 3: every state 1/d: 18/d bytes per parameter in mixed precision (ZeRO's 16/d, with the
    // gradients accumulated in fp32).
    EXPECT_EQ(stage3.weights, weight * n / d);
    EXPECT_EQ(stage3.grads, 4 * n / d);
    EXPECT_EQ(stage3.optimizer, optimizer * n / d);
    EXPECT_EQ(stage3.gathered, 0);
  }
}

// One rank has nothing to reduce: at every ZeRO stage, with gradients accumulated in place (fp32)
// or added in by hooks (bf16), its buckets hold the sums over its micro-batches and no collective
// runs (the fake group fails the test on any).
TEST(DataParallelGrads, OneRankRunsNoCollective) {
  for (int64_t stage : {0, 1, 2})
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << ", " << dtype);
      auto a = torch::zeros({300}, torch::dtype(dtype).requires_grad(true));
      auto b = torch::zeros({500}, torch::dtype(dtype).requires_grad(true));
      GradBufferOptions options;
      options.zero = ZeroSharding{stage, 1};
      const std::vector<torch::Tensor> params = {a, b};
      FakeGroup group(0, 1);
      DataParallelGrads grads(params, make_grad_buckets(params, 4 * 400, torch::kFloat, options.zero), group, options);
      grads.zero();
      for (int micro = 0; micro < 2; ++micro) {
        if (micro == 1) grads.arm();
        ((a * 1).sum() + (b * 2).sum()).backward();
      }
      grads.finish();
      const FlatBuckets& flat = grads.flat();
      auto expected = torch::zeros({flat.total});
      expected.narrow(0, flat.offset[0], 300).fill_(2);
      expected.narrow(0, flat.offset[1], 500).fill_(4);
      for (size_t k = 0; k < grads.num_buckets(); ++k)
        EXPECT_TRUE(torch::equal(grads.reduced(k), expected.narrow(0, flat.slice_start(k, 0), flat.slice_numel(k))));
    }
}

// Gradient-accumulation fusion (parallel/linear_multiply.h): bf16 weights' gradients from the
// linear multiply go into the fp32 buffer in fp32, each micro-batch unrounded, and never reach
// .grad; the bias' gradient takes the hook's path; the input's gradient is LibTorch's own. A
// zero-bubble split (parallel/split_backward.h) adds the weight's share in W, not in I. Without
// fusion each micro-batch's gradient is rounded to bf16 first: an error the fused sum has not.
// On the CPU, and on a GPU where there is one (cuBLAS adding into the fp32 buffer: a LibTorch
// that cannot, and falls back to the 16-bit add, fails it).
TEST(DataParallelGrads, MultipliesAddSixteenBitWeightGradientsInFp32) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA);
  for (const torch::Device& device : devices) {
    SCOPED_TRACE(device.str());
    torch::manual_seed(3);
    const int micro_batches = 3;
    const auto bf16 = torch::dtype(torch::kBFloat16).device(device);
    std::vector<torch::Tensor> rows, upstream;
    for (int m = 0; m < micro_batches; ++m) {
      rows.push_back(torch::randn({24, 16}).to(bf16));
      upstream.push_back(torch::randn({24, 8}).to(bf16));
    }
    const auto weight0 = torch::randn({8, 16}).to(bf16), bias0 = torch::randn({8}).to(bf16);
    // The exact sums, in fp64 from the bf16 values.
    auto exact_weight = torch::zeros({8, 16}, torch::kDouble), exact_bias = torch::zeros({8}, torch::kDouble);
    for (int m = 0; m < micro_batches; ++m) {
      exact_weight += upstream[m].cpu().to(torch::kDouble).t().mm(rows[m].cpu().to(torch::kDouble));
      exact_bias += upstream[m].cpu().to(torch::kDouble).sum(0);
    }
    struct Result {
      torch::Tensor weight, bias;
    };
    auto run = [&](int64_t stage, bool fuse, bool split) {
      auto weight = weight0.clone().requires_grad_(), bias = bias0.clone().requires_grad_();
      // A tensor hook gets the gradients that reach .grad: none of the fused weight's (undefined).
      int weight_grads_seen = 0;
      weight.register_hook([&](const torch::Tensor& g) { weight_grads_seen += g.defined(); });
      const std::vector<torch::Tensor> params = {weight, bias};
      GradBufferOptions options;
      options.zero = ZeroSharding{stage, 1};
      options.fuse_weight_grads = fuse;
      FakeGroup group(0, 1);
      DataParallelGrads grads(params, make_grad_buckets(params, 4 << 20, torch::kFloat, options.zero), group, options);
      grads.zero();
      for (int m = 0; m < micro_batches; ++m) {
        if (m == micro_batches - 1) grads.arm();
        auto input = rows[m].clone().requires_grad_();
        const auto y = multiply_rows(input, weight, bias);
        if (split) {
          WeightGrads later;
          const auto dx = backward_inputs({y}, {upstream[m]}, {input}, later);
          EXPECT_TRUE(torch::allclose(dx.at(0), upstream[m].mm(weight0)));
          if (m == 0 && stage == 0)  // its bucket is the buffer itself
            EXPECT_EQ(grads.reduced(0).abs().max().item<float>(), 0) << "I added a weight's gradient";
          later.run();
        } else {
          torch::autograd::backward({y}, {upstream[m]});
          EXPECT_TRUE(torch::allclose(input.grad(), upstream[m].mm(weight0)));
        }
        EXPECT_FALSE(weight.grad().defined());
      }
      EXPECT_EQ(weight_grads_seen, fuse ? 0 : micro_batches);
      if (stage < 2) EXPECT_EQ(grads.started_during_backward(), 1u);  // the hooks marked the bucket ready
      grads.finish();
      const FlatBuckets& flat = grads.flat();
      const auto all = grads.reduced(0).cpu();
      return Result{all.narrow(0, flat.offset[0], weight.numel()).view({8, 16}).to(torch::kDouble),
                    all.narrow(0, flat.offset[1], bias.numel()).to(torch::kDouble)};
    };
    const double scale = exact_weight.abs().max().item<double>();
    auto error = [&](const torch::Tensor& got) { return (got - exact_weight).abs().max().item<double>() / scale; };
    EXPECT_GT(error(run(0, false, false).weight), 1e-4);  // bf16 rounding of each micro-batch's gradient
    for (int64_t stage : {0, 1, 2})
      for (bool split : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "stage " << stage << (split ? ", split backward" : ""));
        const Result fused = run(stage, true, split);
        EXPECT_LT(error(fused.weight), 1e-6);                              // fp32's rounding alone
        EXPECT_TRUE(torch::allclose(fused.bias, exact_bias, 2e-2, 2e-2));  // bf16 sums, through .grad
      }
  }
}

// The gradient norm decides the clipping: over one default bucket (25 MB of fp32, 6.5 M
// elements) its square must equal an exact sum of squares to 1e-10 (fp64 summation: 1e-12). An
// fp32 accumulation is off by 5e-5 here; positive values make its rounding errors add up.
TEST(ZeroOptimizer, GradientNormIsExactOverMillionsOfElements) {
  const int64_t n = (int64_t(25) << 20) / 4;
  auto param = torch::zeros({n}, torch::kFloat).requires_grad_();
  auto group = make_self_communicator();
  ZeroOptimizer optimizer({{"g", param, ParameterRole::whole()}}, *group, OptimizerConfig{}, ZeroOptions{});
  torch::manual_seed(7);
  const auto grad = torch::rand({n}) + 0.5;
  param.mutable_grad().copy_(grad);  // a view of the flat gradient buffer
  optimizer.grads().finish();
  const double sum = optimizer.grad_square_sum({true}).item<double>();
  long double exact = 0;
  const float* g = grad.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) exact += static_cast<long double>(g[i]) * g[i];
  EXPECT_NEAR(sum, double(exact), 1e-10 * double(exact));
}

TEST(LossScaler, SkipsAndBacksOffOnOverflowAndGrowsAfterAWindow) {
  LossScaleConfig config;
  config.initial = 1024;
  config.window = 3;
  config.min = 256;
  LossScaler scaler(config, Precision::fp16);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped(), 1);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512);  // the overflow restarted the window
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 256);  // the floor
  EXPECT_EQ(scaler.skipped(), 4);
  EXPECT_EQ(scaler.skipped_in_a_row(), 3);  // what loss_scale.max_consecutive_skips bounds
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.skipped_in_a_row(), 0);

  LossScaler none(config, Precision::bf16);
  EXPECT_EQ(none.scale(), 1);
  EXPECT_TRUE(none.update(false));
  EXPECT_EQ(none.skipped(), 0);
}
