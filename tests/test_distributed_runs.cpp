// Multi-process runs of the real `train` program: every parallel layout must reproduce the
// single-process run (loss every step and final parameters). How failures end such runs is
// tests/test_failures.cpp's subject.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "tests/helpers.h"
#include "tests/launchers.h"
#include "tests/run_comparison.h"
#include "train/checkpoint/checkpoint.h"

using namespace trident;
using namespace trident::testing;

namespace {

// The runs' length, and where the resume tests stop and start again.
constexpr int kIters = 4, kStopAt = 2;

std::vector<std::string> model_overrides(const std::string& data) {
  return {"data.path=" + data,       "model.num_layers=8",           "model.hidden_size=64",
          "model.num_attention_heads=4", "model.seq_length=64",      "batch.global_batch_size=16",
          "model.make_vocab_size_divisible_by=64",  // 256 at TP 1, 2 and 4 alike
          "optimizer.lr=3e-3",       "optimizer.warmup_iters=2",     str("train.iters=", kIters),
          "train.eval_interval=0",   "data.valid_fraction=0"};
}

// The `train` command line for `launcher` ("" for one process) and these overrides.
std::string train_command(const std::string& launcher, const std::vector<std::string>& overrides) {
  std::string command = launcher + kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml";
  for (const auto& o : overrides) command += " " + o;
  return command;
}

// The losses of 3 iterations on synthetic tokens with these overrides, logged to `metrics` (a
// fresh file).
std::vector<double> synthetic_losses(const std::string& launcher, const std::filesystem::path& metrics,
                                     const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"data.type=synthetic", "train.iters=3", "train.eval_interval=0",
                                  "train.metrics_file=" + metrics.string()};
  all.insert(all.end(), overrides.begin(), overrides.end());
  std::filesystem::remove(metrics);
  const auto r = run_command("timeout 300 " + train_command(launcher, all));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_losses(metrics);
}

// The architecture keys that make model_overrides' GPT a Llama: RMSNorm, RoPE, SwiGLU, 4 query
// heads in 2 key/value groups (one group per rank at TP 2), no biases, an untied head.
const std::vector<std::string> kLlama = {
    "model.normalization=rmsnorm", "model.position_embedding_type=rope", "model.activation=swiglu",
    "model.ffn_hidden_size=160",   "model.num_query_groups=2",           "model.add_bias_linear=false",
    "model.untie_embeddings_and_output_weights=true"};

// The losses and final parameters of the run train() made in `dir`: whole parameters, assembled
// from the pieces every rank of the layout stored.
RunResult read_run(const std::filesystem::path& dir) {
  return {read_losses(dir / "metrics.jsonl"), read_global_weights(CheckpointStore((dir / "ckpt").string()).path(kIters))};
}

// Trains with `launcher` ("" for one process) and reads back losses and final parameters.
RunResult train(const std::string& launcher, const std::filesystem::path& dir,
                const std::string& data, int micro_batch, const std::string& precision,
                const std::vector<std::string>& parallel = {}) {
  auto overrides = model_overrides(data);
  overrides.push_back("batch.micro_batch_size=" + std::to_string(micro_batch));
  overrides.push_back("precision=" + precision);
  overrides.insert(overrides.end(), parallel.begin(), parallel.end());
  auto result = run_command("timeout 300 " + train_command(launcher, overrides) +
                            " train.checkpoint_dir=" + (dir / "ckpt").string() +
                            " train.metrics_file=" + (dir / "metrics.jsonl").string());
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return read_run(dir);
}

// The four single-process runs the layouts are compared with (fp32 and fp64, GPT-2's and Llama's
// shapes), and the corpus they read. Under CTest they are made once per ctest run, by the fixture
// test SweepReferences.AreTrainedOnce, in the folder TRIDENT_REFERENCE_RUNS names
// (tests/CMakeLists.txt), and only read by the tests; a test binary run by hand makes its own in
// its scratch folder, when first asked for.
class DataParallelRuns : public ::testing::Test {
 public:
  static const char* shared_references() { return std::getenv("TRIDENT_REFERENCE_RUNS"); }
  static std::string reference_name(const std::string& precision, bool llama) {
    return str("serial-", precision, llama ? "-llama" : "");
  }
  // Text that does not change with this repository's sources (Debian's licence texts): an edit
  // elsewhere would otherwise change every run's trajectory, and with it how close the fp32
  // runs' smallest tensors come to their tolerance.
  static void preprocess_corpus(const std::string& output) {
    auto prep = run_command(kBin + "/preprocess --quiet --output " + output +
                            " /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0");
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
  }

 protected:
  static void SetUpTestSuite() {
    // One folder per process: CTest runs each test of this suite as its own process, in parallel.
    root_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                      ("trident-dp-runs-" + std::to_string(::getpid())));
    remove_tree(root_->string());
    std::filesystem::create_directories(*root_);
    references_ = new std::filesystem::path(shared_references() ? shared_references() : *root_ / "references");
    data_ = (*references_ / "corpus").string();
    if (shared_references()) {
      ASSERT_TRUE(std::filesystem::exists(data_ + ".bin"))
          << data_ << ".bin is missing: the fixture test SweepReferences.AreTrainedOnce makes it";
    } else {
      std::filesystem::create_directories(*references_);
      preprocess_corpus(data_);
    }
    serial_runs_ = new std::map<std::string, RunResult>;
  }
  static void TearDownTestSuite() {
    remove_tree(root_->string());
    delete serial_runs_;
    delete references_;
    delete root_;
  }
  // The single-process run of `architecture` (GPT-2's when empty) in `precision`: read from the
  // shared folder, or trained when first asked for.
  static const RunResult& serial(const std::string& precision, const std::vector<std::string>& architecture = {}) {
    const std::string name = reference_name(precision, !architecture.empty());
    auto found = serial_runs_->find(name);
    if (found != serial_runs_->end()) return found->second;
    const auto dir = *references_ / name;
    if (shared_references()) {
      EXPECT_TRUE(std::filesystem::exists(dir / "metrics.jsonl"))
          << dir << " is missing: the fixture test SweepReferences.AreTrainedOnce makes it";
      return serial_runs_->emplace(name, read_run(dir)).first->second;
    }
    return serial_runs_->emplace(name, train("", dir, data_, 8, precision, architecture)).first->second;
  }
  // Trains the layout and compares it with the single-process run of the same precision and
  // architecture.
  static void expect_matches_serial(const std::string& launcher, const std::string& name, int micro_batch,
                                    const std::string& precision, const std::vector<std::string>& parallel = {},
                                    const std::vector<std::string>& architecture = {}) {
    std::vector<std::string> overrides = architecture;
    overrides.insert(overrides.end(), parallel.begin(), parallel.end());
    expect_equal_runs(serial(precision, architecture),
                      train(launcher, *root_ / name, data_, micro_batch, precision, overrides), precision == "fp64");
  }

  static std::filesystem::path* root_;
  static std::filesystem::path* references_;
  static std::string data_;
  static std::map<std::string, RunResult>* serial_runs_;
};
std::filesystem::path* DataParallelRuns::root_ = nullptr;
std::filesystem::path* DataParallelRuns::references_ = nullptr;
std::string DataParallelRuns::data_;
std::map<std::string, RunResult>* DataParallelRuns::serial_runs_ = nullptr;

}  // namespace

// The fixture of the tests below under CTest (tests/CMakeLists.txt): the corpus and the four
// single-process runs, made afresh in TRIDENT_REFERENCE_RUNS for the tests of one ctest run to read.
TEST(SweepReferences, AreTrainedOnce) {
  const char* folder = DataParallelRuns::shared_references();
  if (!folder) GTEST_SKIP() << "TRIDENT_REFERENCE_RUNS is not set: each test process trains the references it needs";
  const std::filesystem::path references(folder);
  remove_tree(references.string());
  std::filesystem::create_directories(references);
  const std::string data = (references / "corpus").string();
  DataParallelRuns::preprocess_corpus(data);
  if (HasFatalFailure()) return;
  for (const std::string precision : {"fp32", "fp64"})
    for (const bool llama : {false, true}) {
      const auto run = train("", references / DataParallelRuns::reference_name(precision, llama), data, 8, precision,
                             llama ? kLlama : std::vector<std::string>{});
      EXPECT_EQ(run.losses.size(), size_t(kIters)) << precision << (llama ? " Llama" : " GPT-2");
    }
}

// One parallel layout, trained and compared with the single-process run of its precision.
struct ParallelRun {
  std::string name;      // also the test's name
  std::string launcher;  // mpirun or launch_env.sh with the process count
  int micro_batch;
  std::string precision;
  std::vector<std::string> overrides;
  std::vector<std::string> architecture = {};  // GPT-2's, or kLlama
};

void PrintTo(const ParallelRun& run, std::ostream* out) { *out << run.name; }

class EqualsSerial : public DataParallelRuns, public ::testing::WithParamInterface<ParallelRun> {};

TEST_P(EqualsSerial, Run) {
  const ParallelRun& run = GetParam();
  if (const std::string why = missing_backend(run.launcher); !why.empty()) GTEST_SKIP() << why;
  expect_matches_serial(run.launcher, run.name, run.micro_batch, run.precision, run.overrides, run.architecture);
}

// The single-process reference reads 16 samples per step as 2 micro-batches of 8; the
// parallel runs read the same 16 as DP ranks x micro-batches x micro-batch size.
INSTANTIATE_TEST_SUITE_P(
    DataParallelRuns, EqualsSerial,
    ::testing::Values(
        // Data parallelism under both launchers.
        ParallelRun{"MpiTwoRanksFp32", kMpirun + "2 ", 4, "fp32", {}},
        ParallelRun{"MpiFourRanksFp64", kMpirun + "4 ", 2, "fp64", {}},
        ParallelRun{"EnvLaunchTwoRanksFp64", kEnvLaunch + "2 -- ", 8, "fp64", {}},
        ParallelRun{"EnvLaunchFourRanksFp32", kEnvLaunch + "4 -- ", 1, "fp32", {}},
        // Across simulated hosts (a network namespace each) with torchrun's variables alone: Gloo
        // finds the interface that routes to MASTER_ADDR (the host name resolves to loopback).
        ParallelRun{"HostsTwoDataParallelFp64", kHostsLaunch + "2 -- ", 8, "fp64", {}},
        ParallelRun{"HostsTwoTensorParallelFp64", kHostsLaunch + "2 -- ", 8, "fp64", {"parallel.tensor=2"}},
        ParallelRun{"HostsTwoPipelineFp64", kHostsLaunch + "2 -- ", 2, "fp64", {"parallel.pipeline=2"}},
        ParallelRun{"HostsFourTensorByPipelineFp32",
                    kHostsLaunch + "4 -- ",
                    2,
                    "fp32",
                    {"parallel.tensor=2", "parallel.pipeline=2"}},
        // Tensor parallelism, with and without sequence parallelism, and TP x DP.
        ParallelRun{"TensorParallelTwoFp64", kMpirun + "2 ", 8, "fp64", {"parallel.tensor=2"}},
        ParallelRun{"TensorParallelFourFp32", kMpirun + "4 ", 8, "fp32", {"parallel.tensor=4"}},
        ParallelRun{"SequenceParallelTwoFp32",
                    kEnvLaunch + "2 -- ",
                    8,
                    "fp32",
                    {"parallel.tensor=2", "parallel.sequence_parallel=true"}},
        ParallelRun{"SequenceParallelFourFp64",
                    kMpirun + "4 ",
                    8,
                    "fp64",
                    {"parallel.tensor=4", "parallel.sequence_parallel=true"}},
        ParallelRun{"TensorTwoByDataTwoWithSelectiveRecomputeFp64",
                    kMpirun + "4 ",
                    4,
                    "fp64",
                    {"parallel.tensor=2", "recompute=selective"}},
        // Pipeline parallelism with each schedule.
        ParallelRun{"PipelineTwo1F1BFp64", kMpirun + "2 ", 2, "fp64", {"parallel.pipeline=2"}},
        ParallelRun{"PipelineFour1F1BFp32", kEnvLaunch + "4 -- ", 2, "fp32", {"parallel.pipeline=4"}},
        ParallelRun{"PipelineTwoGPipeFp64",
                    kEnvLaunch + "2 -- ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=gpipe"}},
        ParallelRun{
            "PipelineFourGPipeFp64", kMpirun + "4 ", 4, "fp64", {"parallel.pipeline=4", "parallel.schedule=gpipe"}},
        ParallelRun{"PipelineTwoInterleavedFp64",
                    kMpirun + "2 ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=4"}},
        ParallelRun{"PipelineFourInterleavedFp32",
                    kMpirun + "4 ",
                    1,
                    "fp32",
                    {"parallel.pipeline=4", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"}},
        // Zero-bubble schedules: each backward split into I and W (parallel/split_backward.h).
        // ZB-H1 and ZB-V at PP 2 and 4 (DualPipe-V below); with TP and DP (ZeRO-2, sequence parallelism and full
        // recomputation, whose replayed blocks split too); ZB-V with the tied embedding's owner
        // and copy on one rank, with ZeRO-3 gathering blocks again for the I only, with ring
        // attention's context parallelism, and Llama's.
        ParallelRun{"ZeroBubbleH1PipelineTwoFp64",
                    kMpirun + "2 ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=zb-h1"}},
        ParallelRun{"ZeroBubbleH1PipelineFourFp64",
                    kEnvLaunch + "4 -- ",
                    2,
                    "fp64",
                    {"parallel.pipeline=4", "parallel.schedule=zb-h1"}},
        ParallelRun{"ZeroBubbleVPipelineTwoFp64",
                    kMpirun + "2 ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=zb-v", "parallel.virtual_stages=2"}},
        ParallelRun{"ZeroBubbleVPipelineFourFp64",
                    kMpirun + "4 ",
                    1,
                    "fp64",
                    {"parallel.pipeline=4", "parallel.schedule=zb-v", "parallel.virtual_stages=2"}},
        ParallelRun{"ZeroBubbleH1ThreeDimensionalZeroTwoRecomputeFp64",
                    kMpirun + "8 ",
                    2,
                    "fp64",
                    {"parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true",
                     "parallel.schedule=zb-h1", "parallel.zero_stage=2", "parallel.bucket_mb=0.05", "recompute=full"}},
        ParallelRun{
            "ZeroBubbleVPipelineFourTensorTwoFp32",
            kEnvLaunch + "8 -- ",
            2,
            "fp32",
            {"parallel.tensor=2", "parallel.pipeline=4", "parallel.schedule=zb-v", "parallel.virtual_stages=2"}},
        ParallelRun{"ZeroBubbleVDataTwoZeroThreeSelectiveRecomputeFp64",
                    kMpirun + "4 ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=zb-v", "parallel.virtual_stages=2",
                     "parallel.zero_stage=3", "recompute=selective"}},
        ParallelRun{
            "ZeroBubbleVContextTwoPipelineTwoFp64",
            kEnvLaunch + "4 -- ",
            2,
            "fp64",
            {"parallel.context=2", "parallel.pipeline=2", "parallel.schedule=zb-v", "parallel.virtual_stages=2"}},
        // With sequence parallelism: SwiGLU's gate and up gather their kept shard again once, in W.
        ParallelRun{"LlamaZeroBubbleVTensorTwoSequenceParallelFp64",
                    kMpirun + "4 ",
                    2,
                    "fp64",
                    {"parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.pipeline=2",
                     "parallel.schedule=zb-v", "parallel.virtual_stages=2"},
                    kLlama},
        // DualPipe-V: the V in DeepSeek's order, its drain split; at PP 2 and 4, and in 3D with ZeRO-1
        // and selective recomputation (M = 2p there, the least it runs).
        ParallelRun{"DualPipeVPipelineTwoFp64",
                    kEnvLaunch + "2 -- ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=dualpipe-v", "parallel.virtual_stages=2"}},
        ParallelRun{"DualPipeVPipelineFourFp64",
                    kMpirun + "4 ",
                    1,
                    "fp64",
                    {"parallel.pipeline=4", "parallel.schedule=dualpipe-v", "parallel.virtual_stages=2"}},
        ParallelRun{"DualPipeVThreeDimensionalZeroOneSelectiveRecomputeFp64",
                    kMpirun + "8 ",
                    2,
                    "fp64",
                    {"parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true",
                     "parallel.schedule=dualpipe-v", "parallel.virtual_stages=2", "parallel.zero_stage=1",
                     "recompute=selective"}},
        // The embedding and the loss in a layer's slot each: 8 layers on 5 stages ([emb L0] [L1 L2]
        // ... [L7 loss], Llama's untied head), and on 2 x 5 chunks of one slot, the ends holding no layer.
        ParallelRun{"PipelineFiveEndsAsLayersFp64",
                    kMpirun + "5 ",
                    2,
                    "fp64",
                    {"parallel.pipeline=5", "parallel.embedding_and_loss_as_layers=true"},
                    kLlama},
        ParallelRun{"PipelineTwoInterleavedEndsAsLayersFp64",
                    kEnvLaunch + "2 -- ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=5",
                     "parallel.embedding_and_loss_as_layers=true"}},
        // 3D with full recomputation: blocks re-run their forward (and its collectives) in backward.
        ParallelRun{"ThreeDimensionalWithRecomputeFp64",
                    kMpirun + "8 ",
                    2,
                    "fp64",
                    {"parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "recompute=full"}},
        // ZeRO: optimizer states sharded over DP (stage 1), gradients too (stage 2), with clipping
        // at work every step (gradient norms 1.6 to 5.6 against optimizer.clip_grad=1), and small
        // buckets so that parameters straddle bucket and shard boundaries.
        ParallelRun{"ZeroOneTwoRanksFp32", kMpirun + "2 ", 4, "fp32", {"parallel.zero_stage=1"}},
        ParallelRun{"ZeroOneFourRanksFp64",
                    kEnvLaunch + "4 -- ",
                    2,
                    "fp64",
                    {"parallel.zero_stage=1", "parallel.bucket_mb=0.1"}},
        ParallelRun{"ZeroTwoTwoRanksFp64", kEnvLaunch + "2 -- ", 4, "fp64", {"parallel.zero_stage=2"}},
        ParallelRun{
            "ZeroTwoFourRanksFp32", kMpirun + "4 ", 2, "fp32", {"parallel.zero_stage=2", "parallel.bucket_mb=0.05"}},
        // ZeRO-2 in 3D: the tied embedding's and sequence-parallel gradients are summed over their
        // groups from sharded gradients.
        ParallelRun{"ThreeDimensionalWithZeroTwoFp32",
                    kMpirun + "8 ",
                    2,
                    "fp32",
                    {"parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true",
                     "parallel.zero_stage=2", "parallel.bucket_mb=0.05"}},
        // ZeRO-3: weights sharded too, each block gathered for its forward and again for its
        // backward; under both launchers, with recomputation (the gathered block re-runs its
        // forward), in 3D, over data x context parallelism under GPipe, with interleaved chunks
        // and with offload.
        ParallelRun{"ZeroThreeTwoRanksFp64", kMpirun + "2 ", 4, "fp64", {"parallel.zero_stage=3"}},
        ParallelRun{"ZeroThreeTwoRanksSelectiveRecomputeFp32",
                    kEnvLaunch + "2 -- ",
                    8,
                    "fp32",
                    {"parallel.zero_stage=3", "recompute=selective"}},
        ParallelRun{"ZeroThreeFourRanksFullRecomputeFp32",
                    kMpirun + "4 ",
                    2,
                    "fp32",
                    {"parallel.zero_stage=3", "recompute=full"}},
        ParallelRun{"ZeroThreeFourRanksFp64", kEnvLaunch + "4 -- ", 1, "fp64", {"parallel.zero_stage=3"}},
        ParallelRun{"ThreeDimensionalWithZeroThreeFp64",
                    kMpirun + "8 ",
                    2,
                    "fp64",
                    {"parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true",
                     "parallel.zero_stage=3", "recompute=full"}},
        ParallelRun{"ContextTwoPipelineTwoGPipeZeroThreeFp64",
                    kEnvLaunch + "4 -- ",
                    2,
                    "fp64",
                    {"parallel.context=2", "parallel.pipeline=2", "parallel.schedule=gpipe", "parallel.zero_stage=3"}},
        ParallelRun{"PipelineTwoInterleavedZeroThreeFp64",
                    kMpirun + "4 ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2",
                     "parallel.zero_stage=3"}},
        ParallelRun{"OffloadZeroThreeDataTwoFp32",
                    kEnvLaunch + "2 -- ",
                    4,
                    "fp32",
                    {"optimizer.offload=cpu", "parallel.zero_stage=3"}},
        // ZeRO-Offload: main weights and moments in host memory, AdamW on the CPU, at DP 2 with and
        // without sharding.
        ParallelRun{"OffloadDataTwoFp32", kEnvLaunch + "2 -- ", 4, "fp32", {"optimizer.offload=cpu"}},
        ParallelRun{"OffloadZeroTwoDataTwoFp64",
                    kMpirun + "2 ",
                    4,
                    "fp64",
                    {"optimizer.offload=cpu", "parallel.zero_stage=2", "parallel.bucket_mb=0.05"}},
        // Context parallelism: each sequence of 64 split over 2 or 4 ranks (chunks of 16 or 8),
        // attention as a ring; alone (and with ZeRO-1 over the CP group), with TP and SP, with
        // GPipe and recomputation, with ZeRO-2 over the combined data x context group, and all
        // four dimensions at once under 1F1B and interleaved 1F1B. fp64 but for the last: in fp32
        // ring attention's block-wise softmax rounds differently from the serial one, and biases
        // with near-zero gradients reach 9e-5 of the 1e-4 allowed a single tensor at CP 4.
        ParallelRun{"ContextParallelTwoFp64", kMpirun + "2 ", 8, "fp64", {"parallel.context=2"}},
        ParallelRun{"ContextParallelFourZeroOneFp64",
                    kEnvLaunch + "4 -- ",
                    8,
                    "fp64",
                    {"parallel.context=4", "parallel.zero_stage=1"}},
        ParallelRun{"ContextTwoTensorTwoSequenceParallelFp64",
                    kMpirun + "4 ",
                    8,
                    "fp64",
                    {"parallel.context=2", "parallel.tensor=2", "parallel.sequence_parallel=true"}},
        ParallelRun{"ContextTwoPipelineTwoGPipeSelectiveRecomputeFp64",
                    kEnvLaunch + "4 -- ",
                    2,
                    "fp64",
                    {"parallel.context=2", "parallel.pipeline=2", "parallel.schedule=gpipe", "recompute=selective"}},
        ParallelRun{"ContextTwoDataTwoZeroTwoFp64",
                    kMpirun + "4 ",
                    4,
                    "fp64",
                    {"parallel.context=2", "parallel.zero_stage=2", "parallel.bucket_mb=0.05"}},
        ParallelRun{"FourDimensionalWithRecomputeFp64",
                    kMpirun + "8 ",
                    2,
                    "fp64",
                    {"parallel.tensor=2", "parallel.context=2", "parallel.pipeline=2",
                     "parallel.sequence_parallel=true", "recompute=full"}},
        ParallelRun{"FourDimensionalInterleavedFp32",
                    kEnvLaunch + "8 -- ",
                    2,
                    "fp32",
                    {"parallel.tensor=2", "parallel.context=2", "parallel.pipeline=2",
                     "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"}},
        // Llama: TP splits whole key/value groups (one per rank) and the SwiGLU gate and up
        // projections; CP rotates each chunk at its global positions and passes 2 key/value heads,
        // not 4, around the ring; the untied head lives on the last pipeline stage alone; ZeRO-3
        // gathers the blocks without biases; and all of it at once.
        ParallelRun{"LlamaTensorTwoSequenceParallelFp64",
                    kMpirun + "2 ",
                    8,
                    "fp64",
                    {"parallel.tensor=2", "parallel.sequence_parallel=true"},
                    kLlama},
        ParallelRun{"LlamaContextTwoFp64", kEnvLaunch + "2 -- ", 8, "fp64", {"parallel.context=2"}, kLlama},
        ParallelRun{"LlamaPipelineTwoInterleavedFp64",
                    kMpirun + "2 ",
                    2,
                    "fp64",
                    {"parallel.pipeline=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"},
                    kLlama},
        ParallelRun{"LlamaZeroThreeDataTwoFullRecomputeFp32",
                    kEnvLaunch + "2 -- ",
                    4,
                    "fp32",
                    {"parallel.zero_stage=3", "recompute=full"},
                    kLlama},
        ParallelRun{"LlamaFourDimensionalFp64",
                    kMpirun + "8 ",
                    2,
                    "fp64",
                    {"parallel.tensor=2", "parallel.context=2", "parallel.pipeline=2",
                     "parallel.sequence_parallel=true", "recompute=selective"},
                    kLlama},
        // Ulysses context parallelism: all-to-alls deal the heads out around attention, which then
        // sees whole sequences; alone, over 4 ranks with ZeRO-1 over the data x context group, in
        // four dimensions with ZeRO-3 and recomputation, and Llama's 2 key/value groups over 4
        // ranks (each repeated once, rotated at their global positions).
        ParallelRun{"UlyssesContextTwoFp64",
                    kMpirun + "2 ",
                    8,
                    "fp64",
                    {"parallel.context=2", "parallel.context_parallel_type=ulysses"}},
        ParallelRun{"UlyssesContextFourZeroOneFp64",
                    kEnvLaunch + "4 -- ",
                    8,
                    "fp64",
                    {"parallel.context=4", "parallel.context_parallel_type=ulysses", "parallel.zero_stage=1"}},
        ParallelRun{
            "UlyssesFourDimensionalZeroThreeFp64",
            kMpirun + "8 ",
            2,
            "fp64",
            {"parallel.tensor=2", "parallel.context=2", "parallel.pipeline=2", "parallel.context_parallel_type=ulysses",
             "parallel.sequence_parallel=true", "parallel.zero_stage=3", "recompute=selective"}},
        ParallelRun{"LlamaUlyssesContextFourFp64",
                    kEnvLaunch + "4 -- ",
                    8,
                    "fp64",
                    {"parallel.context=4", "parallel.context_parallel_type=ulysses"},
                    kLlama},
        // USP: Ulysses within pairs of context-parallel ranks, a ring of 2 across the pairs (a
        // group repeated for Ulysses, then travelling the ring: ContextParallel.Usp* at np 4).
        ParallelRun{"LlamaUspContextFourZeroOneFp64",
                    kEnvLaunch + "4 -- ",
                    8,
                    "fp64",
                    {"parallel.context=4", "parallel.context_parallel_type=ulysses", "parallel.ulysses_size=2",
                     "parallel.zero_stage=1"},
                    kLlama}),
    [](const ::testing::TestParamInfo<ParallelRun>& info) { return info.param.name; });

// A pipelined, tensor-parallel run stopped halfway and resumed to the end equals the straight
// run: every rank restores its own shards.
TEST_F(DataParallelRuns, PipelinedResumeIsExact) {
  const auto dir = *root_ / "resume";
  auto overrides = model_overrides(data_);
  overrides.insert(overrides.end(), {"parallel.tensor=2", "parallel.pipeline=2",
                                     "batch.micro_batch_size=2", str("optimizer.decay_iters=", kIters)});
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const std::string command = "timeout 300 " + train_command(kMpirun + "4 ", overrides);
  auto r = run_command(command + " train.metrics_file=" + (dir / "straight.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpt = " train.checkpoint_dir=" + (dir / "ckpt").string();
  r = run_command(command + ckpt + str(" train.iters=", kStopAt, " train.metrics_file=") + (dir / "first.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(command + ckpt + " train.metrics_file=" + (dir / "second.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  auto straight = read_losses(dir / "straight.jsonl"), first = read_losses(dir / "first.jsonl"),
       second = read_losses(dir / "second.jsonl");
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(first, straight);
  EXPECT_EQ(straight.size(), size_t(kIters));
}

// A blend of two datasets trains the same samples in any layout: DP 2 x PP 2 equals one
// process (fp64), as the single dataset's runs do.
TEST_F(DataParallelRuns, BlendedDataEqualsSerialInAnyLayout) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const std::string other = (*root_ / "other").string();
  auto prep = run_command(kBin + "/preprocess --quiet --output " + other + " /usr/share/common-licenses/MPL-2.0");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const std::string blend = "'0.7 " + data_ + " 0.3 " + other + "'";
  expect_equal_runs(train("", *root_ / "blend-serial", blend, 8, "fp64"),
                    train(kMpirun + "4 ", *root_ / "blend-dp-pp", blend, 4, "fp64", {"parallel.pipeline=2"}), true);
}

// Packed documents kept apart (data.eod_mask_loss, reset_position_ids, reset_attention_mask)
// train the same in every layout, ring attention's masked blocks and USP's (Ulysses in pairs, a
// ring across them) included: fp64, GPT-2's and Llama's shapes, on documents of a line each (most samples hold several).
TEST_F(DataParallelRuns, PackedDocumentsEqualSerialInEveryLayout) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const std::string lines = (*root_ / "lines.jsonl").string(), data = (*root_ / "lines").string();
  {
    std::ifstream in("/usr/share/common-licenses/GPL-3");
    std::ofstream out(lines);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out << nlohmann::json{{"text", line + "\n"}}.dump() << "\n";
  }
  auto prep = run_command(kBin + "/preprocess --quiet --output " + data + " " + lines);
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const std::vector<std::string> documents = {"data.eod_mask_loss=true", "data.reset_position_ids=true",
                                              "data.reset_attention_mask=true"};
  for (const auto& architecture : {std::vector<std::string>{}, kLlama}) {
    std::vector<std::string> serial = architecture;
    serial.insert(serial.end(), documents.begin(), documents.end());
    const std::string name = architecture.empty() ? "gpt" : "llama";
    const RunResult reference = train("", *root_ / ("documents-serial-" + name), data, 8, "fp64", serial);
    const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
        {"cp2-pp2", {"parallel.context=2", "parallel.pipeline=2"}},
        {"usp-cp4", {"parallel.context=4", "parallel.context_parallel_type=ulysses", "parallel.ulysses_size=2"}},
        {"tp2-sp-dp2", {"parallel.tensor=2", "parallel.sequence_parallel=true", "recompute=full"}}};
    for (const auto& [layout, parallel] : layouts) {
      std::vector<std::string> overrides = serial;
      overrides.insert(overrides.end(), parallel.begin(), parallel.end());
      SCOPED_TRACE(name + " " + layout);
      expect_equal_runs(reference, train(kMpirun + "4 ", *root_ / ("documents-" + name + "-" + layout), data, 4, "fp64",
                                         overrides), true);
    }
  }
}

// A ZeRO-3 run at DP 2 stopped halfway resumes exactly from its sharded weights and
// optimizer state; the same checkpoint resumed at DP 4 with ZeRO-1 continues the same run (to
// rounding): each rank picks its pieces out of the saved shards.
TEST_F(DataParallelRuns, ZeroResumeIsExactAndMayChangeTheDataParallelSize) {
  const auto dir = *root_ / "zero-resume";
  auto overrides = model_overrides(data_);
  overrides.insert(overrides.end(), {"precision=fp64", "batch.micro_batch_size=2",
                                     str("optimizer.decay_iters=", kIters), "parallel.bucket_mb=0.1"});
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const std::string dp2 = "timeout 300 " + train_command(kMpirun + "2 ", overrides) + " parallel.zero_stage=3";
  const std::string dp4 = "timeout 300 " + train_command(kMpirun + "4 ", overrides) + " parallel.zero_stage=1";
  auto r = run_command(dp2 + " train.metrics_file=" + (dir / "straight.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto same_dp = dir / "same", other_dp = dir / "other";
  r = run_command(dp2 + str(" train.iters=", kStopAt, " train.checkpoint_dir=") + same_dp.string() +
                  " train.metrics_file=" + (dir / "first.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::filesystem::copy(same_dp, other_dp, std::filesystem::copy_options::recursive);
  r = run_command(dp2 + " train.checkpoint_dir=" + same_dp.string() + " train.metrics_file=" +
                  (dir / "same.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  r = run_command(dp4 + " train.checkpoint_dir=" + other_dp.string() + " train.metrics_file=" +
                  (dir / "other.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;

  const auto straight = read_losses(dir / "straight.jsonl"), first = read_losses(dir / "first.jsonl");
  auto same = first, other = first;
  for (double loss : read_losses(dir / "same.jsonl")) same.push_back(loss);
  for (double loss : read_losses(dir / "other.jsonl")) other.push_back(loss);
  ASSERT_EQ(straight.size(), size_t(kIters));
  EXPECT_EQ(same, straight);
  ASSERT_EQ(other.size(), size_t(kIters));
  for (size_t i = 0; i < size_t(kIters); ++i) EXPECT_NEAR(other[i], straight[i], 1e-10 * straight[i]) << i;
}

// Any layout resumes any other: a TP 2 x PP 2 run stopped halfway and resumed at
// TP 1 x PP 4, at TP 4 x DP 2, at DP 4 with ZeRO-3, under each zero-bubble schedule continues the single-process run (fp64,
// to rounding): every rank assembles its new parts of weights and optimizer state from the
// pieces the old layout stored. The resumed runs' losses and final weights are compared with the straight run's.
TEST_F(DataParallelRuns, CheckpointsResumeAtAnyLayout) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto dir = *root_ / "any-layout";
  auto overrides = model_overrides(data_);
  overrides.insert(overrides.end(), {"precision=fp64", str("optimizer.decay_iters=", kIters)});
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), overrides.begin(), overrides.end());
    return more;
  };
  const auto saved = dir / "tp2-pp2";
  auto r = run_command("timeout 300 " + train_command(kMpirun + "4 ", with({"parallel.tensor=2", "parallel.pipeline=2",
                                                                            "batch.micro_batch_size=2", str("train.iters=", kStopAt),
                                                                            "train.checkpoint_dir=" + saved.string(),
                                                                            "train.metrics_file=" + (dir / "first.jsonl").string()})));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto first = read_losses(dir / "first.jsonl");
  ASSERT_EQ(first.size(), size_t(kStopAt));

  const std::pair<std::string, std::vector<std::string>> layouts[] = {
      {"tp1-pp4", {"parallel.pipeline=4", "batch.micro_batch_size=2"}},
      {"tp4-dp2", {"parallel.tensor=4", "batch.micro_batch_size=4"}},
      {"dp4-zero3", {"parallel.zero_stage=3", "batch.micro_batch_size=2"}},
      {"pp4-zb-h1", {"parallel.pipeline=4", "parallel.schedule=zb-h1", "batch.micro_batch_size=2"}},
      {"pp2-dp2-zb-v",
       {"parallel.pipeline=2", "parallel.schedule=zb-v", "parallel.virtual_stages=2", "batch.micro_batch_size=2"}},
      {"pp4-dualpipe-v",
       {"parallel.pipeline=4", "parallel.schedule=dualpipe-v", "parallel.virtual_stages=2", "batch.micro_batch_size=2"}},
      {"pp2x5-ends-as-layers",
       {"parallel.pipeline=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=5",
        "parallel.embedding_and_loss_as_layers=true", "batch.micro_batch_size=2"}}};
  for (const auto& [name, layout] : layouts) {
    SCOPED_TRACE(name);
    const auto resumed = dir / name;
    std::filesystem::create_directories(resumed);
    std::filesystem::copy(saved, resumed / "ckpt", std::filesystem::copy_options::recursive);
    auto args = with(layout);
    args.insert(args.end(), {"train.checkpoint_dir=" + (resumed / "ckpt").string(),
                             "train.metrics_file=" + (resumed / "metrics.jsonl").string()});
    r = run_command("timeout 300 " + train_command(kMpirun + (name == "tp4-dp2" ? "8 " : "4 "), args));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    RunResult run{first, read_global_weights(CheckpointStore((resumed / "ckpt").string()).path(kIters))};
    for (double loss : read_losses(resumed / "metrics.jsonl")) run.losses.push_back(loss);
    expect_equal_runs(serial("fp64"), run, /*fp64=*/true);
  }
}

// Dropout on, under TP 2 with sequence parallelism and under TP 2 x CP 2 (every stream at
// work, and ring attention's block masks): the run again with full recomputation gives the same
// losses, so runs are reproducible and recomputation replays the masks, and the masks act (the
// losses differ from a dropout-free run).
TEST(Dropout, RunsAreReproducibleAndRecomputeReplaysTheMasks) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  for (const auto& [processes, layout] : {std::pair{"2 ", std::vector<std::string>{}},
                                          std::pair{"4 ", std::vector<std::string>{"parallel.context=2"}}}) {
    SCOPED_TRACE(processes);
    auto losses = [&](const std::string& name, const std::vector<std::string>& extra) {
      std::vector<std::string> overrides = {"model.seq_length=32", "precision=fp64", "parallel.tensor=2",
                                            "parallel.sequence_parallel=true"};
      overrides.insert(overrides.end(), layout.begin(), layout.end());
      overrides.insert(overrides.end(), extra.begin(), extra.end());
      return synthetic_losses(kMpirun + processes, dir / (name + ".jsonl"), overrides);
    };
    const std::vector<std::string> dropout = {"model.hidden_dropout=0.2", "model.attention_dropout=0.2"};
    const auto first = losses("first", dropout);
    ASSERT_EQ(first.size(), 3u);
    auto recomputed = dropout;
    recomputed.push_back("recompute=full");
    const auto replayed = losses("recomputed", recomputed);
    ASSERT_EQ(replayed.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(replayed[i], first[i], 1e-12 * first[i]) << "step " << i;
    const auto without = losses("without", {});
    ASSERT_EQ(without.size(), 3u);
    EXPECT_GT(std::abs(without[2] - first[2]), 1e-6);
  }
}

// bf16 under context parallelism: ring attention computes its blocks in fp32 from bf16 inputs,
// so a CP 2 run tracks the single-process bf16 run within bf16's rounding (3 steps, 0.5%), for
// GPT-2 and for Llama.
TEST(ContextParallelRuns, Bf16TracksTheSingleProcessRun) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  // GPT-2 at CP 2; Llama (rotary tables and RMSNorm in bf16) at TP 2 x CP 2 with SP.
  for (const bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "Llama" : "GPT-2");
    std::vector<std::string> bf16 = {"model.seq_length=64", "precision=bf16"};
    if (llama) bf16.insert(bf16.end(), kLlama.begin(), kLlama.end());
    const std::string name = llama ? "llama" : "gpt2";
    const auto serial = synthetic_losses("", dir / (name + "-serial.jsonl"), bf16);
    auto split = bf16;
    split.push_back("parallel.context=2");
    if (llama) split.insert(split.end(), {"parallel.tensor=2", "parallel.sequence_parallel=true"});
    const auto parallel = synthetic_losses(kMpirun + (llama ? "4 " : "2 "), dir / (name + "-split.jsonl"), split);
    ASSERT_EQ(serial.size(), 3u);
    ASSERT_EQ(parallel.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(parallel[i], serial[i], 5e-3 * serial[i]) << "step " << i;
  }
}
