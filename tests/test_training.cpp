#include <gtest/gtest.h>
#include <malloc.h>
#include <dlfcn.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>

#include "core/fault_injection.h"
#include "core/plan/memory.h"
#include "core/text.h"
#include "optim/parameter_groups.h"
#include "parallel/comm/communicator.h"
#include "tests/helpers.h"
#include "tests/launchers.h"
#include "train/checkpoint/checkpoint.h"
#include "train/device.h"
#include "train/trainer.h"

using namespace trident;
using trident::testing::CommandResult;
using trident::testing::error_of;
using trident::testing::kBin;
using trident::testing::kMpirun;
using trident::testing::kSource;
using trident::testing::missing_backend;
using trident::testing::run_command;
using trident::testing::scratch_dir;
using trident::testing::training_losses;
using trident::testing::write_documents;

namespace {

// A corpus a small model can learn: a few sentences repeated, with random document order.
std::string write_corpus(const std::filesystem::path& dir) {
  const std::vector<std::string> sentences = {
      "the quick brown fox jumps over the lazy dog. ", "pack my box with five dozen jugs. ",
      "how vexingly quick daft zebras jump! ", "sphinx of black quartz, judge my vow. "};
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i) documents.push_back(sentences[(i * 7 + i / 3) % 4]);
  const std::string prefix = (dir / "corpus").string();
  write_documents(prefix, documents);
  return prefix;
}

Config small_config(const std::string& data_prefix, std::vector<std::string> overrides = {}) {
  std::vector<std::string> all = {"data.path=" + data_prefix,
                                  "model.num_layers=2",
                                  "model.hidden_size=32",
                                  "model.num_attention_heads=2",
                                  "model.seq_length=32",
                                  "batch.micro_batch_size=4",
                                  "batch.global_batch_size=8",
                                  "optimizer.lr=5e-3",
                                  "optimizer.warmup_iters=2",
                                  "train.log_interval=1000",
                                  "data.valid_fraction=0.1"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return Config::parse("", all);
}


// Trains `iters` iterations with checkpoints in `checkpoint_dir` (saved at least at the end).
void train_with_checkpoints(const std::string& data, const std::string& checkpoint_dir, int iters,
                            std::vector<std::string> extra = {}) {
  extra.push_back("train.iters=" + std::to_string(iters));
  extra.push_back("train.checkpoint_dir=" + checkpoint_dir);
  Trainer trainer(small_config(data, extra));
  trainer.train();
}

// Compares the first model chunks' weights (gathered first under ZeRO-3).
void expect_same_parameters(Trainer& a, Trainer& b) {
  for (Trainer* trainer : {&a, &b})
    if (auto sharded = trainer->optimizer().sharded_weights()) sharded->acquire_all();
  auto pa = a.model()->named_parameters(), pb = b.model()->named_parameters();
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
}

}  // namespace

TEST(Training, LossFallsOnALearnableCorpus) {
  const auto dir = scratch_dir();
  Trainer trainer(small_config(write_corpus(dir), {"train.iters=100", "train.eval_interval=100"}));
  double valid = 0;
  std::vector<double> losses;
  Hooks hooks;
  hooks.after_step = [&](const IterationMetrics& m) {
    losses.push_back(m.loss);
    EXPECT_GT(m.tokens_per_second, 0);
    EXPECT_GT(m.tflops_model, 0);
  };
  hooks.after_validation = [&](const IterationMetrics& m) { valid = m.valid_loss; };
  trainer.set_hooks(hooks);
  trainer.train();
  ASSERT_EQ(losses.size(), 100u);
  // The corpus's unigram entropy is 3.16 nats: a model that learnt no context stays above it.
  EXPECT_GT(losses.front(), 5.0);  // about ln 256 at the start
  EXPECT_LT(losses.back(), 0.6 * 3.16);
  EXPECT_LT(valid, 0.6 * 3.16);
}

TEST(Training, GradientAccumulationEqualsOneLargeMicroBatch) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  Trainer accumulated(small_config(data, {"train.iters=3", "precision=fp64"}));
  Trainer single(small_config(data, {"train.iters=3", "precision=fp64", "batch.micro_batch_size=8"}));
  EXPECT_EQ(accumulated.layout().micro_batches, 2);
  EXPECT_EQ(single.layout().micro_batches, 1);
  auto a = training_losses(accumulated), b = training_losses(single);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
  auto pa = accumulated.model()->named_parameters(), pb = single.model()->named_parameters();
  for (const auto& item : pa)
    EXPECT_TRUE(torch::allclose(item.value(), pb[item.key()], 1e-10, 1e-12)) << item.key();
}

// A library user's own communicator must span the launch's processes.
// train.profile_iteration leaves each rank a trace of that iteration and a table of where its
// time went (a LibTorch without Kineto, Debian's 1.13, is refused by name, as is an iteration
// the run never reaches, or iterations that end past the run).
TEST(Training, AProfiledIterationLeavesATraceAndWhereTheTimeWent) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir), profiles = (dir / "profiles").string();
  const auto config = small_config(data, {"train.iters=3", "train.profile_iteration=2", "train.profile_dir=" + profiles});
  EXPECT_NE(error_of([&] { Trainer(small_config(data, {"train.iters=3", "train.profile_iteration=4"})); })
                .find("train.profile_iteration=4 is past train.iters=3: no iteration would be profiled"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Trainer(small_config(data, {"train.iters=3", "train.profile_iteration=2", "train.profile_iterations=3"}));
            }).find("train.profile_iterations=3 from train.profile_iteration=2 end past train.iters=3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { small_config(data, {"train.profile_iterations=0"}); }).find("train.profile_iterations"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Trainer(small_config(data, {"train.iters=3", "train.profile_iterations=2"})); })
                .find("train.profile_iterations=2 needs train.profile_iteration, the first iteration to profile"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Trainer(small_config(data, {"train.iters=3", "train.profile_iteration=2", "train.profile_ranks=0,1"}));
            }).find("train.profile_ranks=0,1 names rank 1, but the job has 1 process(es): ranks 0 to 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { small_config(data, {"train.profile_ranks=0,0"}); })
                .find("config key 'train.profile_ranks': expected all, or ranks separated by commas (0,3), got '0,0'"),
            std::string::npos);
#if TORCH_VERSION_MAJOR < 2
  EXPECT_NE(error_of([&] { Trainer trainer(config); }).find("train.profile_iteration=2 needs a LibTorch whose profiler"),
            std::string::npos);
#else
  Trainer trainer(config);
  trainer.train();
  const std::string trace = read_text_file(profiles + "/rank0.json", "trace");
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("aten::"), std::string::npos);
  const std::string table = read_text_file(profiles + "/rank0.txt", "table");
  EXPECT_EQ(table.rfind("rank 0, iteration 2: operators by total time", 0), 0u) << table;
  EXPECT_NE(table.find("aten::"), std::string::npos) << table;
#endif
}

// A traced iteration of TP 2 x PP 2 shows each rank's own work in its trace, in trident's spans:
// its collectives by group and size, its pipeline's forwards and backwards by micro-batch, its
// data loading (both stages read the batch: the first its tokens, the last its targets); and
// train.profile_iterations traces several iterations in one.
TEST(Training, ATracedIterationShowsEachRanksCommunicationAndPipeline) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "LibTorch 1.13 (Debian's) has no Kineto to trace with";
#else
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto profiles = scratch_dir() / "profiles";
  const CommandResult run = run_command(
      "timeout 300 " + kMpirun + "4 " + kBin + "/train --config " + kSource +
      "/configs/gpt-tiny.yaml data.type=synthetic train.iters=2 train.eval_interval=0 train.metrics_file= "
      "parallel.tensor=2 parallel.pipeline=2 train.profile_iteration=2 train.profile_dir=" + profiles.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string trace = read_text_file(str(profiles.string(), "/rank", rank, ".json"), "trace");
    for (const std::string span : {"\"all_reduce tensor-parallel ", "\"exchange (start) pipeline ",
                                   "\"pipeline forward: micro-batch 0, chunk 0\"",
                                   "\"pipeline backward: micro-batch 0, chunk 0\"", "\"data: micro-batch 0 of "})
      EXPECT_NE(trace.find(span), std::string::npos) << "rank " << rank << ": no span " << span;
    EXPECT_NE(trace.find("\"Input Dims\""), std::string::npos) << "rank " << rank << ": no input shapes";
  }
  const auto count = [](const std::string& text, const std::string& word) {
    int n = 0;
    for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
    return n;
  };
  const std::string span = "\"pipeline backward: micro-batch 0, chunk 0\"";
  const int once = count(read_text_file(profiles.string() + "/rank3.json", "trace"), span);
  EXPECT_GT(once, 0);
  // Only the ranks asked for, without the operators' input shapes when so asked; two iterations
  // in one trace hold each span twice as often as one iteration's.
  const auto some = scratch_dir() / "some";
  const CommandResult chosen = run_command(
      "timeout 300 " + kMpirun + "4 " + kBin + "/train --config " + kSource +
      "/configs/gpt-tiny.yaml data.type=synthetic train.iters=2 train.eval_interval=0 train.metrics_file= "
      "parallel.tensor=2 parallel.pipeline=2 train.profile_iteration=1 train.profile_iterations=2 "
      "train.profile_ranks=3 train.profile_shapes=false train.profile_dir=" + some.string());
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  EXPECT_NE(chosen.output.find("profiled iterations 1 to 2 (the traces and tables of ranks 3 in " + some.string() + "/)"),
            std::string::npos) << chosen.output;
  for (int rank = 0; rank < 3; ++rank) EXPECT_FALSE(std::filesystem::exists(str(some.string(), "/rank", rank, ".json")));
  const std::string two = read_text_file(some.string() + "/rank3.json", "trace");
  EXPECT_EQ(two.find("\"Input Dims\""), std::string::npos);
  EXPECT_EQ(count(two, span), 2 * once);
  EXPECT_EQ(read_text_file(some.string() + "/rank3.txt", "table").rfind("rank 3, iterations 1 to 2: ", 0), 0u);
#endif
}

TEST(Training, RefusesACommunicatorOfAnotherSize) {
  LaunchInfo launch;
  launch.world_size = 2;
  const std::string message = error_of([&] {
    Trainer trainer(small_config("unused", {"data.type=synthetic"}), launch, make_self_communicator());
  });
  EXPECT_NE(message.find("Trainer was given a communicator of size 1 but the launch has WORLD_SIZE=2"),
            std::string::npos) << message;
}

// In one process ZeRO's shard is everything: stages 1, 2 and 3 train exactly as stage 0.
TEST(Training, ZeroStagesInOneProcessEqualStageZero) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  std::vector<std::vector<double>> losses;
  for (const char* stage : {"0", "1", "2", "3"}) {
    Trainer trainer(small_config(data, {"train.iters=3", "precision=fp64",
                                        std::string("parallel.zero_stage=") + stage}));
    losses.push_back(training_losses(trainer));
  }
  EXPECT_LT(losses[0].back(), losses[0].front());
  EXPECT_EQ(losses[1], losses[0]);
  for (size_t stage : {2, 3})
    for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[stage][i], losses[0][i], 1e-12) << stage;
}

// bf16 weights and activations with fp32 main weights and gradient accumulation follow the fp32
// run: every loss within 3% of it (bf16 keeps 8 significant bits).
TEST(MixedPrecision, Bf16TracksTheFp32LossCurve) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  Trainer fp32(small_config(data, {"train.iters=40"}));
  Trainer bf16(small_config(data, {"train.iters=40", "precision=bf16"}));
  EXPECT_EQ(bf16.model()->named_parameters()[0].value().scalar_type(), torch::kBFloat16);
  auto a = training_losses(fp32), b = training_losses(bf16);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(b[i] - a[i]) / a[i]);
  std::printf("bf16 vs fp32: worst relative loss difference %.4f, final %.4f vs %.4f\n", worst,
              b.back(), a.back());
  EXPECT_LT(worst, 0.03);
  EXPECT_LT(b.back(), 0.7 * b.front());
}

// Gradient-accumulation fusion (parallel/linear_multiply.h) in whole models: GPT-2 (its head the
// tied embedding: the head's share fused, the lookup's through .grad) and Llama (an untied head,
// SwiGLU's gate and up on one input), at ZeRO-0 and at ZeRO-3 (weights gathered unit by unit).
// bf16 training with it follows the run without it (model.fused_kernels=false) within bf16's
// rounding, and differs from it: its sums are not rounded to bf16 each micro-batch, so it ran.
TEST(MixedPrecision, Bf16GradientAccumulationFusionFollowsTheUnfusedRun) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::vector<std::string> llama = {"model.normalization=rmsnorm",
                                          "model.position_embedding_type=rope",
                                          "model.activation=swiglu",
                                          "model.ffn_hidden_size=64",
                                          "model.num_query_groups=1",
                                          "model.add_bias_linear=false",
                                          "model.untie_embeddings_and_output_weights=true"};
  for (const bool is_llama : {false, true})
    for (const std::string stage : {"0", "3"}) {
      SCOPED_TRACE((is_llama ? "Llama, ZeRO-" : "GPT-2, ZeRO-") + stage);
      std::vector<std::string> settings = {"train.iters=6", "precision=bf16", "parallel.zero_stage=" + stage};
      if (is_llama) settings.insert(settings.end(), llama.begin(), llama.end());
      auto with = settings, without = settings;
      with.push_back("model.fused_kernels=true");
      without.push_back("model.fused_kernels=false");
      Trainer fused_run(small_config(data, with)), unfused_run(small_config(data, without));
      const auto fused = training_losses(fused_run), unfused = training_losses(unfused_run);
      ASSERT_EQ(fused.size(), unfused.size());
      bool differs = false;
      for (size_t i = 0; i < fused.size(); ++i) {
        EXPECT_NEAR(fused[i], unfused[i], 0.01 * unfused[i]) << "iteration " << i + 1;
        differs |= fused[i] != unfused[i];
      }
      EXPECT_TRUE(differs);
      EXPECT_LT(fused.back(), fused.front());
    }
}

// An fp16 step whose gradients overflow is skipped (the weights stay as they were) and halves
// the loss scale; the steps around it update normally.
TEST(MixedPrecision, Fp16OverflowSkipsExactlyThatStepAndHalvesTheScale) {
  const auto dir = scratch_dir();
  const std::string device = torch::cuda::is_available() ? "cuda" : "cpu";
  // A modest initial scale, so that only the injected overflow makes a step skip.
  const auto config = small_config(write_corpus(dir), {"train.iters=4", "precision=fp16",
                                                       "loss_scale.initial=1024",
                                                       "train.device=" + device});
  // Only a CPU without fp16 matrix multiplies (LibTorch 1.13's) may excuse the test.
  if (device == "cpu") try {
      (void)torch::mm(torch::ones({2, 2}, torch::kHalf), torch::ones({2, 2}, torch::kHalf));
    } catch (const c10::Error&) {
      GTEST_SKIP() << "this LibTorch has no fp16 matrix multiply on the CPU";
    }
  Trainer trainer(config);
  bool overflow = false;
  auto param = trainer.model()->named_parameters()[0].value();
  param.register_hook([&](torch::Tensor grad) {
    return overflow ? grad * std::numeric_limits<double>::infinity() : grad;
  });
  auto snapshot = [&] {
    std::vector<torch::Tensor> out;
    for (const auto& p : trainer.model()->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  auto same = [](const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y) {
    for (size_t i = 0; i < x.size(); ++i)
      if (!torch::equal(x[i], y[i])) return false;
    return true;
  };
  const double initial = config.loss_scale.initial;
  for (int i = 1; i <= 4; ++i) {
    overflow = i == 3;
    const auto before = snapshot();
    const IterationMetrics m = trainer.step();
    EXPECT_EQ(m.skipped, i == 3) << "step " << i;
    EXPECT_EQ(same(before, snapshot()), i == 3) << "step " << i;
    EXPECT_EQ(m.loss_scale, i <= 3 ? initial : initial / 2) << "step " << i;
    EXPECT_EQ(m.skipped_total, i >= 3 ? 1 : 0);
  }
}

// fp32 (main weights are the weights) and bf16 (main weights are fp32 copies, saved apart), and
// bf16 with the optimizer offloaded to host memory or the weights sharded (ZeRO-3: saved from
// the shard).
class CheckpointResume : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointResume, IsBitExact) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  // Dropout on, so the restored RNG state matters too.
  const std::string precision = GetParam().substr(0, 4), variant = GetParam().substr(4);
  const std::vector<std::string> common = {"model.hidden_dropout=0.1", "model.attention_dropout=0.1",
                                           "precision=" + precision,
                                           variant == "_offload" ? "optimizer.offload=cpu" : "optimizer.offload=none",
                                           variant == "_zero3" ? "parallel.zero_stage=3" : "parallel.zero_stage=0"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return small_config(data, extra);
  };
  // The schedule must not depend on where a run stops: decay over a fixed number of iterations.
  Trainer straight(with({"train.iters=8", "optimizer.decay_iters=8"}));
  auto all = training_losses(straight);

  const std::string ckpt = (dir / "ckpt").string();
  {
    Trainer first(with({"train.iters=5", "optimizer.decay_iters=8", "train.checkpoint_dir=" + ckpt}));
    auto head = training_losses(first);
    for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(head[i], all[i]);
  }
  Trainer resumed(with({"train.iters=8", "optimizer.decay_iters=8", "train.checkpoint_dir=" + ckpt}));
  EXPECT_EQ(resumed.iteration(), 5);
  EXPECT_EQ(resumed.consumed_samples(), 40);
  auto tail = training_losses(resumed);
  ASSERT_EQ(tail.size(), 3u);
  for (size_t i = 0; i < tail.size(); ++i) EXPECT_EQ(tail[i], all[5 + i]) << i;
  expect_same_parameters(straight, resumed);
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointResume, ::testing::Values("fp32", "bf16", "bf16_offload", "bf16_zero3"));

// ZeRO-3 in one process (4 blocks): between iterations and after a forward only this rank's
// shard of the weights is held, whole blocks are gathered no more than two at a time (the one
// computing and the next), the rest of the model for the iteration. The most gathered at once
// equals the estimate.
TEST(ZeroThree, GathersTwoBlocksAtATimeAndFreesThem) {
  const auto dir = scratch_dir();
  const Config config = small_config(write_corpus(dir), {"model.num_layers=4", "parallel.zero_stage=3", "train.iters=1"});
  Trainer trainer(config);
  const auto sharded = trainer.optimizer().groups().front().optimizer->sharded_weights();  // the dense group
  ASSERT_TRUE(sharded);
  ASSERT_EQ(trainer.optimizer().groups().size(), 1u);
  GPT& model = trainer.model();
  // Bytes of the module's parameters whose storage is held.
  auto held_by = [](const torch::nn::Module& module) {
    int64_t bytes = 0;
    for (const auto& p : module.parameters())
      if (p.storage().nbytes() > 0) bytes += p.numel() * int64_t(p.element_size());
    return bytes;
  };
  EXPECT_EQ(held_by(*model), 0);
  EXPECT_EQ(sharded->gathered_bytes(), 0);

  // A training step ends with nothing gathered; the most it held at once is the estimate.
  trainer.step();
  EXPECT_EQ(sharded->gathered_bytes(), 0);
  EXPECT_EQ(held_by(*model), 0);
  const MemoryEstimate estimate = estimate_memory(config.model, config.model.padded_vocab(), trainer.layout(),
                                                  config.precision, build_software(torch::kCPU));
  EXPECT_EQ(double(trainer.optimizer().memory().gathered), estimate.gathered);
  EXPECT_EQ(double(trainer.optimizer().memory().weights), estimate.weights);

  // A forward keeps the rest (embeddings, final LayerNorm) and frees every block after use;
  // backward gathers each block again, two at a time, and frees it.
  int64_t block_bytes = 0;
  for (const auto& p : model->blocks[0]->parameters()) block_bytes += p.numel() * int64_t(p.element_size());
  sharded->reset_peak();
  const auto tokens = torch::randint(0, 256, {2, 32}, torch::kLong);
  const auto loss = model->loss(tokens, tokens);
  for (const auto& block : model->blocks) EXPECT_EQ(held_by(*block), 0);
  const int64_t rest_bytes = held_by(*model);
  EXPECT_GT(rest_bytes, 0);
  EXPECT_EQ(sharded->gathered_bytes(), rest_bytes);
  EXPECT_EQ(sharded->peak_gathered_bytes(), rest_bytes + 2 * block_bytes);
  sharded->reset_peak();
  loss.backward();
  for (const auto& block : model->blocks) EXPECT_EQ(held_by(*block), 0);
  EXPECT_EQ(sharded->peak_gathered_bytes(), rest_bytes + 2 * block_bytes);
  EXPECT_EQ(double(rest_bytes + 2 * block_bytes), estimate.gathered);
}

// The layout may change between save and resume (tests/test_distributed_runs.cpp), the model
// and its arithmetic may not: a run of another width or precision is refused before it builds.
TEST(Checkpoint, ResumeRefusesAnotherModel) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  train_with_checkpoints(data, ckpt, 1);
  for (const auto& [change, message] : std::vector<std::pair<std::string, std::string>>{
           {"model.hidden_size=64", "was saved with model.hidden_size=32 but this run has model.hidden_size=64"},
           {"precision=fp64", "was saved with precision=\"fp32\" but this run has precision=\"fp64\""},
           {"model.make_vocab_size_divisible_by=64", "model.make_vocab_size_divisible_by=128 but this run has"}}) {
    const std::string error = error_of([&] {
      Trainer t(small_config(data, {"train.checkpoint_dir=" + ckpt, "train.resume=true", "train.iters=2", change}));
    });
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
  // Another layout, and the other kernels for the same arithmetic (model.fused_kernels).
  Trainer same(small_config(data, {"train.checkpoint_dir=" + ckpt, "train.iters=2", "parallel.zero_stage=1",
                                   "model.fused_kernels=false"}));
  EXPECT_EQ(same.iteration(), 1);
}

TEST(Checkpoint, KeepsTheNewestAndRefusesToClobber) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  train_with_checkpoints(data, ckpt, 7, {"train.save_interval=2", "train.keep_checkpoints=2"});
  CheckpointStore store(ckpt);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(store.latest(), 7);

  auto message = error_of([&] {
    Trainer t(small_config(data, {"train.checkpoint_dir=" + ckpt, "train.resume=false"}));
  });
  EXPECT_NE(message.find("already holds 2 checkpoints (iter_0000006 to iter_0000007), latest: iteration 7; set "
                         "train.resume=true"), std::string::npos) << message;

  message = error_of([&] {
    Trainer t(small_config(data, {"train.checkpoint_dir=" + ckpt, "model.hidden_size=64"}));
  });
  EXPECT_NE(message.find("saved with model.hidden_size=32 but this run has model.hidden_size=64"),
            std::string::npos) << message;

  // Two folders newer than `latest` are not what an interrupted save leaves: someone's, kept.
  std::filesystem::copy(store.path(7), store.path(8), std::filesystem::copy_options::recursive);
  std::filesystem::copy(store.path(7), store.path(9), std::filesystem::copy_options::recursive);
  message = error_of([&] { Trainer t(small_config(data, {"train.checkpoint_dir=" + ckpt})); });
  EXPECT_NE(message.find("'" + store.path(8) + "', newer than its `latest` pointer"), std::string::npos) << message;
  remove_tree(store.path(8));
  remove_tree(store.path(9));

  std::ofstream(std::filesystem::path(ckpt) / "latest", std::ios::trunc) << "iter_0000099\n";
  message = error_of([&] { store.latest(); });
  EXPECT_NE(message.find("names 'iter_0000099', which is not a checkpoint folder of " + ckpt), std::string::npos)
      << message;
}

// A broken `latest` is described in words: garbage bytes are counted, never echoed; a directory
// is called one; a directory of checkpoints without a pointer names them and how to resume.
TEST(Checkpoint, BrokenPointersAreDescribedInWords) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  train_with_checkpoints(data, ckpt, 3, {"train.save_interval=1", "train.keep_checkpoints=2"});
  CheckpointStore store(ckpt);
  const auto pointer = std::filesystem::path(ckpt) / "latest";
  std::string garbage(100, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 97 + 13) % 256);
  std::ofstream(pointer, std::ios::binary | std::ios::trunc) << garbage;
  std::string message = error_of([&] { store.latest(); });
  EXPECT_EQ(message, "checkpoint pointer '" + pointer.string() + "' should name a folder iter_NNNNNNN, but holds 100 "
                     "bytes that are not text");
  std::ofstream(pointer, std::ios::trunc) << std::string(1000, 'x');
  message = error_of([&] { store.latest(); });
  EXPECT_NE(message.find("holds 1000 bytes, far too many for a folder name"), std::string::npos) << message;
  std::ofstream(pointer, std::ios::trunc) << "  iter_0000003\n";  // white space around a name is fine
  EXPECT_EQ(store.latest(), 3);
  std::ofstream(pointer, std::ios::trunc) << "iter_abc\n";
  message = error_of([&] { store.latest(); });
  EXPECT_NE(message.find("should name a folder iter_NNNNNNN, but reads 'iter_abc'"), std::string::npos) << message;

  std::filesystem::remove(pointer);
  std::filesystem::create_directory(pointer);
  message = error_of([&] { store.latest(); });
  EXPECT_EQ(message, "checkpoint pointer '" + pointer.string() + "' is a directory; it should be a file naming the "
                     "newest checkpoint folder (iter_NNNNNNN)");

  std::filesystem::remove(pointer);
  message = error_of([&] { Trainer t(small_config(data, {"train.checkpoint_dir=" + ckpt})); });
  EXPECT_NE(message.find("holds 2 checkpoints (iter_0000002 to iter_0000003) but no `latest` pointer naming the one "
                         "to resume from; to resume from the newest, write iter_0000003 into " + ckpt + "/latest"),
            std::string::npos) << message;
  EXPECT_EQ(message.find("newer than"), std::string::npos) << message;
  message = error_of([&] { checkpoint_folder(ckpt, "--checkpoint"); });
  EXPECT_NE(message.find("holds 2 checkpoints (iter_0000002 to iter_0000003) but no `latest` pointer naming one: "
                         "pass one of its folders, or write the newest's name (iter_0000003) into"),
            std::string::npos) << message;
}

// A save killed after publishing its folder and before moving `latest` (or writing the first
// one) leaves one complete folder newer than `latest`: the same command resumes from it, saying so.
TEST(Checkpoint, ASaveInterruptedBeforeMovingLatestResumesFromItsFolder) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  train_with_checkpoints(data, ckpt, 3, {"train.save_interval=1", "train.keep_checkpoints=3"});
  CheckpointStore store(ckpt);
  const auto pointer = std::filesystem::path(ckpt) / "latest";
  std::ofstream(pointer, std::ios::trunc) << "iter_0000002\n";
  const Config config = small_config(data, {"train.checkpoint_dir=" + ckpt, "train.iters=4"});
  auto point = find_resume_point(store, config);
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(point->folder, store.path(3));
  EXPECT_EQ(point->progress.iteration, 3);
  EXPECT_EQ(point->interrupted, "resuming from " + store.path(3) + ", the newest complete checkpoint: a save was "
                                "interrupted after publishing it, before moving `latest` from iter_0000002; `latest` "
                                "now names it");
  EXPECT_EQ(point->warning, "");
  Trainer resumed(config);
  EXPECT_EQ(resumed.iteration(), 3);
  EXPECT_EQ(store.latest(), 3);

  // The first save: no `latest` yet, one folder.
  remove_tree(store.path(1));
  remove_tree(store.path(2));
  std::filesystem::remove(pointer);
  point = find_resume_point(store, config);
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(point->folder, store.path(3));
  EXPECT_NE(point->interrupted.find("before writing `latest`"), std::string::npos) << point->interrupted;
}

// Every file below `dir`, by relative path, with its bytes.
std::map<std::string, std::string> folder_snapshot(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
    if (entry.is_regular_file())
      files[std::filesystem::relative(entry.path(), dir).string()] = read_text_file(entry.path().string(), "file");
  return files;
}

// A save that fails at any of its file steps in turn (core/fault_injection.h: a file created,
// its first write, its flush, the folder flushed, the folder renamed into place, `latest`
// written and renamed) leaves the checkpoint directory byte for byte as it was, and says why.
TEST(Checkpoint, ASaveThatFailsAtAnyStepLeavesTheDirectoryAsItWas) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  train_with_checkpoints(data, ckpt, 2);
  const auto before = folder_snapshot(ckpt);
  int64_t steps = 0;
  for (int64_t n = 1; steps == 0; ++n) {
    ASSERT_LT(n, 100) << "more steps than expected";
    Trainer trainer(small_config(data, {"train.checkpoint_dir=" + ckpt, "train.iters=3"}));
    inject_fault_at(n);
    std::string error;
    try {
      trainer.train();
    } catch (const std::exception& e) {
      error = e.what();
    }
    inject_fault_at(0);
    if (error.empty()) {
      steps = n - 1;
      break;
    }
    EXPECT_NE(error.find("Input/output error"), std::string::npos) << n << ": " << error;
    EXPECT_EQ(folder_snapshot(ckpt), before) << "failed at step " << n << ": " << error;
  }
  EXPECT_GE(steps, 15);
  EXPECT_EQ(CheckpointStore(ckpt).latest(), 3);
}

TEST(Checkpoint, AKilledSaveLeavesThePreviousOneIntact) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  train_with_checkpoints(data, ckpt, 2);
  CheckpointStore store(ckpt);
  // A save killed half-way through writing its files: no cleanup runs.
  store.begin(3);
  std::ofstream(store.staging_path(3) + "/" + model_file(0, 0)) << "half a file";
  EXPECT_EQ(store.latest(), 2);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{2}));
  // A save that fails (here: its writer throws) removes what it wrote.
  EXPECT_THROW(store.save(
                   4,
                   [](const std::string& folder) -> std::vector<FileRecord> {
                     std::ofstream(folder + "/" + model_file(0, 0)) << "half a file";
                     throw std::runtime_error("disk on fire");
                   },
                   2, 1.0),
               std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(store.staging_path(4)));
  EXPECT_EQ(store.latest(), 2);
  // The previous checkpoint still resumes, and the next save clears the killed one's debris.
  Trainer resumed(small_config(data, {"train.iters=3", "train.checkpoint_dir=" + ckpt}));
  EXPECT_EQ(resumed.iteration(), 2);
  resumed.train();
  EXPECT_EQ(store.latest(), 3);
  for (const auto& entry : std::filesystem::directory_iterator(ckpt))
    EXPECT_EQ(entry.path().filename().string().find(".staging"), std::string::npos);
}

// A run whose loss spikes and does not come back stops with an error naming the iteration,
// before anything is saved at it, and the last healthy checkpoint survives: a healthy run of 4
// iterations goes on at a learning rate of 30 without clipping, saving every iteration with
// keep_checkpoints=1. The first such step (iteration 5) ruins the weights but records the finite
// loss computed before it; from iteration 6 on the losses are far above the history the
// checkpoint brought along, and the fifth in a row (train.loss_spike_patience) ends the run, or
// a loss that is not finite before it. The checkpoints saved since 5 hold ruined weights and are
// marked so; rotation kept checkpoint 4 all along, which the error names and which resumes;
// resuming from the newest warns.
TEST(Training, SpikesThatDoNotComeBackStopBeforeSavingAndKeepTheLastHealthyCheckpoint) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  const std::vector<std::string> saving = {"train.checkpoint_dir=" + ckpt, "train.save_interval=1",
                                           "train.keep_checkpoints=1"};
  train_with_checkpoints(data, ckpt, 4, saving);
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), saving.begin(), saving.end());
    return small_config(data, extra);
  };
  const Config diverging_config =
      with({"train.iters=20", "optimizer.lr=30", "optimizer.clip_grad=0", "optimizer.warmup_iters=0"});
  Trainer diverging(diverging_config);
  const std::string message = error_of([&] { diverging.train(); });
  const int64_t stopped = std::stoll(message.substr(std::string("iteration ").size()));
  ASSERT_TRUE(stopped >= 6 && stopped <= 10) << message;
  const std::string row = stopped == 10 ? "the loss did not come back: 5 losses in a row (" : "the loss is ";
  EXPECT_EQ(message.rfind(str("iteration ", stopped, ": ", row), 0), 0u) << message;
  const std::string newest = str(ckpt, "/iter_000000", stopped - 1);
  EXPECT_NE(message.find(str("training diverged; stopped before saving anything at this iteration (the newest "
                             "checkpoint, ", newest, stopped == 6 ? ", holds the weights that gave the loss of "
                                                                  : ", holds weights trained after the bad losses began at ",
                             "iteration 6; the newest healthy one, ", ckpt, "/iter_0000004, whose next loss passed "
                             "the divergence guard: to resume from it, move the newer ones out of ", ckpt,
                             " and write iter_0000004 into its `latest`)")),
            std::string::npos) << message;
  CheckpointStore store(ckpt);
  EXPECT_EQ(store.latest(), stopped - 1);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{4, stopped - 1}));
  EXPECT_EQ(store.unhealthy_reason(stopped - 1).rfind(str("iteration ", stopped, ": ", row), 0), 0u)
      << store.unhealthy_reason(stopped - 1);
  EXPECT_EQ(store.unhealthy_reason(4), "");
  EXPECT_EQ(store.newest_healthy(stopped - 1), 4);

  // Resuming from the newest checkpoint as it is warns, naming the healthy one.
  const auto point = find_resume_point(store, diverging_config);
  ASSERT_TRUE(point.has_value());
  EXPECT_NE(point->warning.find(str("resuming from ", store.path(stopped - 1), ", after which a run stopped (iteration ",
                                    stopped, ": ", row)),
            std::string::npos) << point->warning;
  EXPECT_NE(point->warning.find("the newest healthy checkpoint is " + store.path(4)), std::string::npos)
      << point->warning;
  EXPECT_EQ(point->progress.recent_losses.size(), 5u);
  EXPECT_EQ(point->progress.unhealthy_losses.size(), size_t(stopped - 6));
  EXPECT_EQ(point->progress.first_unhealthy, stopped == 6 ? -1 : 6);
  // Resumed as it is, at a learning rate that no longer ruins it, the run gets a fresh row: the
  // high losses it carries are what stopped the run before, not this one's.
  {
    Trainer again(with({str("train.iters=", stopped), "optimizer.lr=1e-4", "train.save_interval=0"}));
    EXPECT_EQ(again.iteration(), stopped - 1);
    std::string error;
    try {
      again.step();
    } catch (const std::exception& e) {
      error = e.what();
    }
    EXPECT_EQ(error, "");
  }

  // As the error says: checkpoint 4 resumes without a warning, and trains on.
  std::filesystem::rename(store.path(stopped - 1), dir / "iter_newest.bad");
  std::ofstream(std::filesystem::path(ckpt) / "latest", std::ios::trunc) << "iter_0000004\n";
  EXPECT_EQ(find_resume_point(store, diverging_config)->warning, "");
  // Had a run stopped after it for another cause (a bad batch, say), resuming would warn, and the
  // first loss after it passing clears the mark: rotation keeps it as the newest healthy one.
  store.mark_unhealthy(4, "iteration 5: a bad batch, say");
  EXPECT_NE(find_resume_point(store, diverging_config)->warning, "");
  Trainer resumed(with({"train.iters=5"}));
  EXPECT_EQ(resumed.iteration(), 4);
  for (double loss : training_losses(resumed)) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(store.unhealthy_reason(4), "");
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{4, 5}));
}

// Rotation keeps the newest `keep` checkpoints and the newest healthy one: the newest older one
// whose loss was finite and after which no run stopped.
TEST(Checkpoint, RotationKeepsTheNewestHealthyCheckpoint) {
  CheckpointStore store((scratch_dir() / "ckpt").string());
  auto save = [&](int64_t iteration, double loss) {
    store.save(iteration, [](const std::string&) { return std::vector<FileRecord>{}; }, 1, loss);
  };
  save(1, 2.5);
  save(2, 2.4);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{1, 2}));
  save(3, std::nan(""));  // an fp16 step that overflowed, say
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{2, 3}));
  save(4, std::numeric_limits<double>::infinity());
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{2, 4}));
  save(5, 2.0);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{2, 5}));
  save(6, 1.9);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{5, 6}));
  // A run resumed from 6 stopped at iteration 7: 6 is no longer healthy, 5 stays.
  store.mark_unhealthy(6, "iteration 7: the loss is 1e+12, a spike");
  save(8, 1.8);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(store.latest(), 8);
  // Saved while the divergence guard has seen 2 unhealthy losses in a row (iterations 9 and 10): 8 gave
  // the first, so it is not known to be healthy, and 5 stays instead.
  store.begin(10);
  write_manifest_part(store.staging_path(10), 0, {});
  store.commit(10, 1, 5.0, /*first_unhealthy=*/9);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{5, 10}));
  save(11, 1.7);  // the loss came back: 10 is the newest healthy one
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{10, 11}));
  // A pruned folder goes under another name before it is removed: a kill while it is removed
  // leaves a hidden folder (which the next save removes), never an iter_ folder missing files.
  const auto hidden = std::filesystem::path(store.dir()) / ".removing-iter_0000010";
  std::filesystem::create_directory(hidden);
  write_text_file((hidden / "model.safetensors").string(), "half");
  save(12, 1.6);
  EXPECT_FALSE(std::filesystem::exists(hidden));
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{11, 12}));
  for (const auto& entry : std::filesystem::directory_iterator(store.dir()))
    EXPECT_EQ(entry.path().filename().string().rfind(".removing-", 0), std::string::npos) << entry.path();
  // Once every checkpoint holds weights from after a divergence began, the advice is to start afresh.
  EXPECT_NE(recovery_advice(store, 11).find(str("; no checkpoint in ", store.dir(), " is from before the bad losses "
                                                "began: start afresh (train.resume=false into another ")),
            std::string::npos) << recovery_advice(store, 11);
  // A checkpoint folder without its manifest (a save that did not finish) is named as such.
  std::filesystem::remove(std::filesystem::path(store.path(12)) / "manifest.json");
  EXPECT_NE(error_of([&] { checkpoint_folder(store.path(12), "--checkpoint"); })
                .find("is a checkpoint folder without its manifest.json: a save that did not finish"),
            std::string::npos);
}

// Every file is checked against the checksum in manifest.json before it is loaded: a flipped
// byte inside a tensor, which LibTorch itself would load silently, is an error naming the file.
TEST(Checkpoint, CorruptFilesAreNamed) {
  const auto dir = scratch_dir();
  const std::string data = write_corpus(dir);
  const std::string ckpt = (dir / "ckpt").string();
  train_with_checkpoints(data, ckpt, 1);
  const std::string folder = CheckpointStore(ckpt).path(1);
  const std::string optimizer = folder + "/" + optimizer_file(0, 0, 0);
  const auto size = std::filesystem::file_size(optimizer);
  auto resume = [&] { return error_of([&] { Trainer t(small_config(data, {"train.checkpoint_dir=" + ckpt})); }); };
  {
    std::fstream file(optimizer, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(std::streamoff(size / 2));
    const char byte = char(file.get() ^ 0x10);
    file.seekp(std::streamoff(size / 2));
    file.put(byte);
  }
  auto message = resume();
  EXPECT_NE(message.find("optimizer_tp0_pp0_dp0.safetensors' is corrupt: it holds " + std::to_string(size) +
                         " bytes with XXH3 "), std::string::npos) << message;
  std::filesystem::resize_file(optimizer, size - 100);
  message = resume();
  EXPECT_NE(message.find("is corrupt: it holds " + std::to_string(size - 100) + " bytes"), std::string::npos)
      << message;
  std::filesystem::remove(folder + "/model_tp0_pp0.safetensors");
  message = resume();
  EXPECT_NE(message.find("model_tp0_pp0.safetensors' is missing"), std::string::npos) << message;
  // Nothing loads unchecked: not without a manifest, not from another format.
  std::ofstream(folder + "/manifest.json") << R"({"format": "trident checkpoint 1", "files": {}, "loss": 1.0})";
  message = resume();
  EXPECT_NE(message.find("has format \"trident checkpoint 1\"; this trident reads \"trident checkpoint 2\""),
            std::string::npos) << message;
  std::filesystem::remove(folder + "/manifest.json");
  message = resume();
  EXPECT_NE(message.find("checkpoint '" + folder + "' has no manifest.json; cannot check or load"), std::string::npos)
      << message;
}

// Host memory training frees stays in the heap for the next iteration: a 16 MiB tensor (above
// glibc's default 128 KiB threshold) is not a fresh mapping, and its memory stays free in the
// heap after it is released instead of going back to the kernel (to be page-faulted in again).
TEST(CpuThreads, FreedHostMemoryIsKeptForTheNextIteration) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc";
#elif defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's, whose heap this measures";
#else
  EXPECT_EQ(keep_freed_host_memory(), "host memory: tensors up to 32 MiB from the heap, up to 1 GiB of it kept when freed");
  const size_t mapped = mallinfo2().hblkhd;
  constexpr size_t kBytes = 16 << 20;
  {
    auto tensor = torch::ones({int64_t(kBytes / sizeof(float))});
    EXPECT_EQ(mallinfo2().hblkhd, mapped) << "the tensor was mapped on its own";
  }
  EXPECT_GE(mallinfo2().fordblks, kBytes) << "the freed tensor went back to the kernel";
#endif
}

// train.threads: trident's programs load OpenBLAS's OpenMP build (CMakeLists.txt), so LibTorch
// and OpenBLAS share one pool of the threads asked for (two pools of N on N cores ran 2.6x
// slower); 0 follows OMP_NUM_THREADS, else shares the CPUs among the machine's ranks.
// LibTorch's multiplies run on OpenBLAS (Debian's LibTorch) or MKL (pip's), each sharing
// LibTorch's OpenMP pool: train.threads sets that one pool, and the log says which it is.
TEST(CpuThreads, LibTorchAndItsBlasShareOnePool) {
  const int before = torch::get_num_threads();
  using Count = int (*)();
  const auto openblas_threads = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const auto mkl_threads = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "mkl_get_max_threads"));
  ASSERT_TRUE(openblas_threads || mkl_threads) << "LibTorch's BLAS is neither OpenBLAS nor MKL";
  if (openblas_threads && reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"))() != 2)
    GTEST_SKIP() << "built without libopenblas0-openmp (scripts/setup installs it)";
  const Count blas_threads = openblas_threads ? openblas_threads : mkl_threads;
  const std::string shared = openblas_threads ? ", shared by LibTorch and OpenBLAS (OpenMP)"
                                              : ", shared by LibTorch and MKL (OpenMP)";
  EXPECT_EQ(set_cpu_threads(2, 1), "2 CPU threads" + shared);
  EXPECT_EQ(torch::get_num_threads(), 2);
  EXPECT_EQ(blas_threads(), 2);
  // 0: OMP_NUM_THREADS when set (CTest sets 1), else the CPUs shared among the local ranks.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string saved = omp ? omp : "";
  setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(set_cpu_threads(0, 1), "3 CPU threads" + shared);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(set_cpu_threads(0, 1024), "1 CPU thread" + shared);
  EXPECT_EQ(torch::get_num_threads(), 1);
  EXPECT_EQ(blas_threads(), 1);
  if (omp) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  set_cpu_threads(before, 1);
}
