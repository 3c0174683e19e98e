// The installed programs, run as a user runs them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/config.h"
#include "core/files.h"
#include "core/plan/device_profile.h"
#include "core/text.h"
#include "tests/helpers.h"
#include "tests/launchers.h"
#include "train/checkpoint/checkpoint.h"
#include "train/families/family.h"
#include "train/families/gpt2/gpt2.h"
#include "train/checkpoint/safetensors.h"
#include "train/data/indexed_dataset.h"
#include "train/data/tokenizer.h"

using trident::Config;
using trident::testing::scratch_dir;

namespace {

using Result = trident::testing::CommandResult;
const auto run = trident::testing::run_command;

const std::string kBin = TRIDENT_BINARY_DIR;
const std::string kSource = TRIDENT_SOURCE_DIR;

int count(const std::string& text, const std::string& word) {
  int n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(TrainProgram, BadInputGetsOneClearError) {
  const auto dir = scratch_dir();
  const std::string config = (dir / "c.yaml").string();
  std::ofstream(config) << "model:\n  hiden_size: 64\ndata:\n  type: synthetic\n";
  Result r = run(kBin + "/train --config " + config);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count(r.output, "error"), 1) << r.output;
  EXPECT_NE(r.output.find("unknown config key 'model.hiden_size'; did you mean 'model.hidden_size'?"),
            std::string::npos) << r.output;

  r = run(kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml data.path=" +
          (dir / "missing").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("missing.idx' cannot be opened"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << "trained despite bad data";

  r = run("WORLD_SIZE=2 " + kBin + "/train --config " + config);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("missing RANK, MASTER_ADDR, MASTER_PORT"), std::string::npos) << r.output;
  // Open MPI's variables copied outside mpirun: one line naming the variable, no MPI notice.
  r = run("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 " + kBin + "/train --config " + kSource +
          "/configs/gpt-tiny.yaml data.type=synthetic");
  if (r.output.find("not built into this trident") == std::string::npos) {  // a build with MPI
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.output, "error (rank 0): launch environment: OMPI_COMM_WORLD_SIZE=2 but MPI started 1 process(es): "
                        "this process was not started by mpirun; unset the OMPI_COMM_WORLD_* variables to run a "
                        "single process\n");
  }

  const std::string synthetic = kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml data.type=synthetic ";
  r = run(synthetic + "parallel.zero_stage=4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("parallel.zero_stage"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << "trained despite a bad ZeRO stage";
  r = run(synthetic + "optimizer.offload=nvme");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count(r.output, "error"), 1) << r.output;
  EXPECT_NE(r.output.find("optimizer.offload"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("none, cpu"), std::string::npos) << r.output;

  // A schedule file: missing, and one that deadlocks (a backward before its forward), each one
  // line before any work.
  const std::string one_micro_batch = synthetic + "batch.micro_batch_size=4 batch.global_batch_size=4 ";
  r = run(one_micro_batch + "parallel.schedule_file=" + (dir / "none.csv").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count(r.output, "error"), 1) << r.output;
  EXPECT_NE(r.output.find("parallel.schedule_file"), std::string::npos) << r.output;
  std::ofstream(dir / "s.csv") << "# backward first\n0B0,0F0\n";
  r = run(one_micro_batch + "parallel.schedule_file=" + (dir / "s.csv").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count(r.output, "error"), 1) << r.output;
  EXPECT_NE(r.output.find("s.csv deadlocks: rank 0 waits at its action 1 (0B0) for 0F0"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << "trained despite a schedule that deadlocks";

  r = run(kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml --bogus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("The following argument was not expected: --bogus"), std::string::npos) << r.output;
}

TEST(Programs, EveryProgramExplainsItselfWithHelp) {
  for (const std::string program : {"train", "plan", "preprocess", "bench", "allreduce_bench", "activation_memory",
                                    "adamw_bench", "export", "generate", "generate_bench", "plot", "pipeline_bubble"}) {
    Result r = run(kBin + "/" + program + " --help");
    EXPECT_EQ(r.exit_code, 0) << program << "\n" << r.output;
    EXPECT_NE(r.output.find("Usage: " + program + " [OPTIONS]"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("error"), std::string::npos) << r.output;
  }
}

// Each mistake ends with exit code 2 and one line that names the option and what it expects.
TEST(Programs, BadArgumentsGetOneLineNamingTheOption) {
  const auto dir = scratch_dir();
  const std::pair<std::string, std::string> cases[] = {
      {"plan --size 1.7b --gpus abc", "error: --gpus: expected a positive integer, got 'abc' (see plan --help)"},
      {"plan --size 1.7b --gpus 0", "error: --gpus: expected a positive integer, got '0'"},
      {"plan --size 1.7b --device v100",
       "error: --device: expected a100, h100, h200 or a GPU's name with a built-in profile (an A100, an H100 or H200 "
       "SXM), got 'v100'"},
      {"plan --size 1.7b --device 'NVIDIA H100 PCIe'",
       "error: --device: expected a100, h100, h200 or a GPU's name with a built-in profile (an A100, an H100 or H200 "
       "SXM), got 'NVIDIA H100 PCIe'"},
      {"allreduce_bench --backend ucx", "error: --backend: expected one of auto, mpi, gloo, nccl, got 'ucx'"},
      {"allreduce_bench --device gpu", "error: --device: expected one of cpu, cuda, got 'gpu'"},
      {"plan --size 1.7b --profile " + (dir / "none.yaml").string(),
       "error: device profile '" + (dir / "none.yaml").string() + "' cannot be read"},
      {"plan --size 2t", "error: --size: expected one of 1.7b, 3.6b"},
      {"plan --help-me", "error: The following argument was not expected: --help-me"},
      {"train --config", "error: --config: 1 required TEXT missing (see train --help)"},
      {"train --config " + dir.string(), "error: config file '" + dir.string() + "' cannot be read: Is a directory"},
      {"preprocess docs", "error: --output is required"},
      {"preprocess --output d --tokenizer wordpiece docs",
       "error: --tokenizer: expected one of byte, sentencepiece, gpt2, hf"},
      {"preprocess --output d --tokenizer sentencepiece docs",
       "error: --tokenizer sentencepiece needs --vocab-size N (to train one) or --tokenizer-model FILE"},
      {"preprocess --output d --tokenizer sentencepiece --vocab-size 100 docs",
       "error: --vocab-size: expected an integer >= 259, got '100'"},
      {"preprocess --output d --tokenizer sentencepiece --vocab-size 500 --tokenizer-model m docs",
       "error: --vocab-size excludes --tokenizer-model"},
      {"preprocess --output d --vocab-size 500 docs", "error: --vocab-size is for --tokenizer sentencepiece, not byte"},
      {"preprocess --output d --tokenizer gpt2 --vocab v.json docs",
       "error: --tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt"},
      {"preprocess --output d --merges m.txt docs", "error: --merges is for --tokenizer gpt2, not byte"},
      {"preprocess --output d --tokenizer hf docs", "error: --tokenizer hf needs --tokenizer-json tokenizer.json"},
      {"preprocess --output d --workers 0 docs", "error: --workers: expected a positive integer, got '0'"},
      {"preprocess --output d --tokenizer gpt2 --vocab v --merges m --tokenizer-json t docs",
       "error: --tokenizer-json is for --tokenizer hf, not gpt2"},
      {"preprocess --output d --tokenizer hf --tokenizer-json " + (dir / "none.json").string() + " " + kSource +
           "/README.md",
       "error: Hugging Face tokenizer '" + (dir / "none.json").string() + "' cannot be read"},
      {"plan --largest", "error: --gpus N is needed with --largest"},
      {"adamw_bench --threads 0", "error: --threads: expected a positive integer, got '0'"},
      {"bench --bogus", "error: The following argument was not expected: --bogus (see bench --help)"},
      {"bench --iters 0", "error: --iters: expected a positive integer, got '0'"},
      {"bench --dtype fp32,fp8", "error: --dtype: expected one of fp32, tf32, fp16, bf16, got 'fp8'"},
      {"allreduce_bench --max-bytes 1x", "error: --max-bytes: x unit not recognized"},
      {"allreduce_bench --op broadcast",
       "error: --op: expected one of all_reduce, reduce_scatter, all_gather, all_to_all"},
      {"pipeline_bubble --schedules 1f1b,zb-x",
       "error: pipeline_bubble: --schedules takes parallel.schedule values by commas (gpipe, 1f1b, interleaved_1f1b, "
       "zb-h1, zb-v, dualpipe-v), got 'zb-x'"},
      {"pipeline_bubble --micro-batches 4,x",
       "error: pipeline_bubble: --micro-batches takes positive counts by commas, got 'x'"},
      {"pipeline_bubble --actions 0", "error: --actions: expected a positive integer, got '0'"},
  };
  for (const auto& [command, message] : cases) {
    Result r = run(kBin + "/" + command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_EQ(r.output.rfind(message, 0), 0u) << command << "\n" << r.output;
    EXPECT_EQ(count(r.output, "\n"), 1) << command << "\n" << r.output;
  }
}

// `pipeline_bubble --actions P` prints a generator's schedule as a schedule file
// (docs/parallelism.md's example), running nothing, and says which it cannot write.
TEST(Programs, PipelineBubblePrintsASchedulesActionsAsAFile) {
  const Result r = run(kBin + "/pipeline_bubble --actions 2 --schedules zb-h1,dualpipe-v --micro-batches 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "# parallel.schedule=zb-h1, 2 ranks, M = 3\n"
            "0F0,0F1,0I0,0W0,0F2,0I1,0W1,0I2,0W2\n"
            "1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1W2\n"
            "# parallel.schedule=dualpipe-v, 2 ranks, M = 3: skipped, M is below 2 x ranks\n");
}

// Binary files are skipped; when nothing else is left there is no dataset to write.
TEST(PreprocessProgram, OnlyBinaryInputIsAnErrorAndLeavesNoDataset) {
  const auto dir = scratch_dir();
  std::ofstream(dir / "blob", std::ios::binary) << std::string("\x7f" "ELF\0\0\1", 7);
  Result r = run(kBin + "/preprocess --quiet --output " + (dir / "out").string() + " " + (dir / "blob").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("error: no documents in the 1 input files: 1 empty or binary documents skipped"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "out.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.idx"));
}

// A SentencePiece dataset: trained on the inputs, recorded beside the dataset, reused from its
// .model, stored as uint16; train refuses a model.vocab_size that does not cover it.
TEST(PreprocessProgram, SentencePieceDatasetsCarryTheirTokenizerIntoTraining) {
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "sp").string(), again = (dir / "again").string();
  Result r = run(kBin + "/preprocess --quiet --tokenizer sentencepiece --vocab-size 600 --output " + prefix + " " +
                 kSource + "/core");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer: SentencePiece BPE (600 ids)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.vocab_size must be >= 600"), std::string::npos) << r.output;
  EXPECT_EQ(trident::IndexedDataset(prefix).type(), trident::TokenType::uint16);
  EXPECT_EQ(trident::load_dataset_tokenizer(prefix)->describe(), "SentencePiece BPE (600 ids)");

  r = run(kBin + "/preprocess --quiet --tokenizer sentencepiece --tokenizer-model " + prefix + ".model --output " +
          again + " " + kSource + "/core");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(trident::read_text_file(again + ".bin", "dataset"), trident::read_text_file(prefix + ".bin", "dataset"));

  const std::string train = kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml data.path=" + prefix +
                            " train.iters=2 train.metrics_file= ";
  r = run(train + "model.vocab_size=256");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(count(r.output, "error"), 1) << r.output;
  EXPECT_NE(r.output.find("model.vocab_size (256) does not cover the tokenizer dataset '" + prefix +
                          "' was made with, SentencePiece BPE (600 ids) (" + prefix +
                          ".tokenizer.json): set model.vocab_size to at least 600"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << "trained despite a vocabulary too small";
  r = run(train + "model.vocab_size=600");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SentencePiece BPE (600 ids)"), std::string::npos) << r.output;
}

// A GPT-2 BPE dataset holds what the tokenizer makes of each file, then <|endoftext|>.
TEST(PreprocessProgram, Gpt2BpeDatasetsHoldEachFileThenEndOfText) {
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "g").string(), text = (dir / "a.txt").string();
  std::ofstream(text) << "hello the world\n";
  const std::string gpt2 = kSource + "/tests/data/gpt2-tiny/";
  Result r = run(kBin + "/preprocess --quiet --tokenizer gpt2 --vocab " + gpt2 + "vocab.json --merges " + gpt2 +
                 "merges.txt --output " + prefix + " " + text);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  trident::IndexedDataset dataset(prefix);
  EXPECT_EQ(dataset.type(), trident::TokenType::uint16);
  std::vector<int64_t> tokens(size_t(dataset.num_tokens()));
  dataset.read(0, dataset.num_tokens(), tokens.data());
  EXPECT_EQ(tokens, (std::vector<int64_t>{261, 258, 266, 10, 267}));  // hello Ġthe Ġworld Ċ <|endoftext|>
}

namespace {

std::string gpt2_preprocess(const std::string& options) {
  const std::string gpt2 = kSource + "/tests/data/gpt2-tiny/";
  return kBin + "/preprocess --quiet --tokenizer gpt2 --vocab " + gpt2 + "vocab.json --merges " + gpt2 +
         "merges.txt " + options;
}

// The files in `dir` whose names start with `stem`.
std::vector<std::string> files_named(const std::filesystem::path& dir, const std::string& stem) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind(stem, 0) == 0) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// JSON lines, gzip-compressed or not, beside a text file: one document per line, the same
// dataset byte for byte from 1 or 3 workers; a dataset written into its input folder does not
// read its own files when it is made again.
TEST(PreprocessProgram, JsonLinesGiveTheSameDatasetForAnyNumberOfWorkers) {
  const auto dir = scratch_dir();
  const auto corpus = dir / "corpus";
  std::filesystem::create_directories(corpus);
  std::ofstream(corpus / "a.txt") << "hello the world\n";
  std::string lines;
  for (int i = 0; i < 3000; ++i) lines += "{\"id\": " + std::to_string(i) + ", \"text\": \"the world " + std::string(size_t(i % 50), 'o') + "\"}\n";
  std::ofstream(corpus / "b.jsonl") << lines;
  ASSERT_EQ(run("gzip -c " + (corpus / "b.jsonl").string() + " > " + (corpus / "c.jsonl.gz").string()).exit_code, 0);
  const std::string one = (dir / "one").string(), three = (dir / "three").string();
  Result r = run(gpt2_preprocess("--output " + one + " " + corpus.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + one + ".bin/.idx: 6001 documents"), std::string::npos) << r.output;
  r = run(gpt2_preprocess("--workers 3 --output " + three + " " + corpus.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 3 threads"), std::string::npos) << r.output;
  for (const char* suffix : {".bin", ".idx"})
    EXPECT_EQ(trident::read_text_file(three + suffix, "dataset"), trident::read_text_file(one + suffix, "dataset"));
  trident::IndexedDataset dataset(one);
  std::vector<int64_t> first(5);
  dataset.read(0, 5, first.data());
  EXPECT_EQ(first, (std::vector<int64_t>{261, 258, 266, 10, 267}));  // a.txt: hello Ġthe Ġworld Ċ <|endoftext|>

  for (int pass = 0; pass < 2; ++pass) {  // the second pass finds inside.* in the folder it walks
    r = run(gpt2_preprocess("--output " + (corpus / "inside").string() + " " + corpus.string()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(trident::read_text_file((corpus / "inside.bin").string(), "dataset"),
              trident::read_text_file(one + ".bin", "dataset")) << "pass " << pass;
  }
  // Megatron's way, the dataset named after its input: b.jsonl is read, not taken for b's own.
  r = run(gpt2_preprocess("--output " + (corpus / "b").string() + " " + (corpus / "b.jsonl").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3000 documents"), std::string::npos) << r.output;
}

// A folder shaped like this repository's (sources, configs, tokenizer files, a package.json, a
// JSON array, JSON lines): .jsonl files found in it are JSON lines, every other file one text
// document; a .json named on the command line is JSON lines, with their strict errors.
TEST(PreprocessProgram, ReadsAFolderOfMixedFilesAsTextAndJsonLines) {
  const auto dir = scratch_dir();
  const auto repo = dir / "repo";
  for (const char* folder : {"core", "configs", "tests/data/gpt2-tiny", "web"})
    std::filesystem::create_directories(repo / folder);
  std::ofstream(repo / "README.md") << "# a project\n";
  std::ofstream(repo / "core/main.cpp") << "int main() { return 0; }\n";
  std::ofstream(repo / "configs/tiny.yaml") << "model:\n  hidden_size: 8\n";
  std::ofstream(repo / "tests/data/gpt2-tiny/vocab.json") << "{\"hello\": 0, \"world\": 1}";
  std::ofstream(repo / "package.json") << "{\n  \"name\": \"x\",\n  \"version\": \"1.0.0\"\n}\n";
  std::ofstream(repo / "web/array.json") << "[1, 2, 3]\n";
  std::ofstream(repo / "web/pages.jsonl") << "{\"text\": \"first page\"}\n{\"text\": \"second page\"}\n";
  ASSERT_EQ(run("printf '{\"text\": \"gzipped page\"}\\n' | gzip -c > " + (repo / "web/more.jsonl.gz").string()).exit_code, 0);
  const std::string prefix = (dir / "out").string();
  Result r = run(kBin + "/preprocess --quiet --output " + prefix + " " + repo.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 6 text files (README.md, main.cpp, tiny.yaml, vocab.json, package.json, array.json), 3 lines.
  EXPECT_NE(r.output.find("9 documents"), std::string::npos) << r.output;
  trident::IndexedDataset dataset(prefix);
  std::string stored;  // the byte tokenizer's ids are the bytes; 0 ends each document
  std::vector<int64_t> tokens(size_t(dataset.num_tokens()));
  dataset.read(0, dataset.num_tokens(), tokens.data());
  for (int64_t token : tokens) stored += token == 0 ? '|' : char(token);
  EXPECT_NE(stored.find("|first page|second page|"), std::string::npos) << stored;
  EXPECT_NE(stored.find("|gzipped page|"), std::string::npos) << stored;
  EXPECT_NE(stored.find("{\"hello\": 0, \"world\": 1}|"), std::string::npos) << stored;

  const std::string named = (repo / "web/array.json").string();
  r = run(kBin + "/preprocess --quiet --output " + prefix + "-named " + named);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "error: input '" + named + "' line 1 is a JSON array, not an object (--skip-bad-lines skips such lines)\n");
  r = run(kBin + "/preprocess --help");
  EXPECT_NE(r.output.find(".json files named here"), std::string::npos) << r.output;
}

// A bad JSON line stops the run, naming file and line, before anything is written; with
// --skip-bad-lines it is counted instead.
TEST(PreprocessProgram, BadJsonLinesAreNamedOrSkippedAndCounted) {
  const auto dir = scratch_dir();
  const std::string input = (dir / "mixed.jsonl").string(), prefix = (dir / "out").string();
  std::ofstream(input) << "{\"text\": \"one\"}\n\n{\"text\": 3}\n{\"body\": \"x\"}\n{\"text\": \"two\"}\n";
  Result r = run(kBin + "/preprocess --quiet --output " + prefix + " " + input);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "error: input '" + input + "' line 3 holds a number under \"text\", not a string "
                      "(--skip-bad-lines skips such lines)\n");
  EXPECT_EQ(files_named(dir, "out"), std::vector<std::string>{});
  r = run(kBin + "/preprocess --quiet --skip-bad-lines --output " + prefix + " " + input);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 documents, 8 tokens (0 empty or binary documents, 2 bad lines skipped)"),
            std::string::npos) << r.output;
  r = run(kBin + "/preprocess --quiet --json-keys body --skip-bad-lines --output " + prefix + " " + input);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 documents, 2 tokens (0 empty or binary documents, 3 bad lines skipped)"),
            std::string::npos) << r.output;
}

// A write that fails (a file-size limit stands in for a full disk: SIGXFSZ, which would kill the
// program silently, is ignored by it) and an interrupted run leave no dataset and no .partial
// file behind.
TEST(PreprocessProgram, AFailedOrInterruptedRunLeavesNothingBehind) {
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "out").string();
  std::ofstream(dir / "big.txt") << std::string(400000, 'a');
  Result r = run("bash -c 'ulimit -f 100; exec " + kBin + "/preprocess --quiet --output " + prefix +
                 " " + (dir / "big.txt").string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "error: writing '" + prefix + ".bin.partial' failed: File too large\n");
  EXPECT_EQ(files_named(dir, "out"), std::vector<std::string>{});

  // The input is a named pipe that stays open until after the signal, so the run is still
  // reading when SIGINT comes.
  const std::string fifo = (dir / "stream.jsonl").string();
  ASSERT_EQ(run("mkfifo " + fifo).exit_code, 0);
  r = run("bash -c '" + kBin + "/preprocess --quiet --output " + prefix + " " + fifo + " & pid=$!; exec 3>" + fifo +
          "; echo {\\\"text\\\": \\\"a\\\"} >&3; until [ -e " + prefix + ".bin.partial ]; do sleep 0.05; done; " +
          "kill -INT $pid; echo {\\\"text\\\": \\\"b\\\"} >&3; exec 3>&-; wait $pid; echo exit $?'");
  EXPECT_EQ(r.output, "error: interrupted by Interrupt: no dataset written\nexit 130\n");
  EXPECT_EQ(files_named(dir, "out"), std::vector<std::string>{});
}

namespace {

// Every file in `dir` whose name starts with `stem`, with its bytes.
std::map<std::string, std::string> snapshot(const std::filesystem::path& dir, const std::string& stem) {
  std::map<std::string, std::string> files;
  for (const auto& name : files_named(dir, stem))
    files[name] = trident::read_text_file((dir / name).string(), "file");
  return files;
}

void restore(const std::filesystem::path& dir, const std::string& stem, const std::map<std::string, std::string>& files) {
  for (const auto& name : files_named(dir, stem)) std::filesystem::remove(dir / name);
  for (const auto& [name, bytes] : files) std::ofstream(dir / name, std::ios::binary) << bytes;
}

}  // namespace

// A run that replaces a dataset (another tokenizer, other text) fails at each of its file steps
// in turn (core/fault_injection.h): each time the older dataset stays byte for byte and nothing
// else stays behind. Killed at each step instead (SIGKILL: no cleanup at all), the next run puts
// a half-published dataset back and removes what the killed one left, before it writes: failing
// at its own first step, it too leaves the older dataset as it was.
TEST(PreprocessProgram, AFailureOrAKillAtAnyStepLeavesTheOlderDatasetAsItWas) {
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "out").string();
  std::ofstream(dir / "old.txt") << "the older text, byte-level";
  std::ofstream(dir / "new.jsonl") << "{\"text\": \"newer\"}\n{\"text\": \"text\"}\n";
  ASSERT_EQ(run(kBin + "/preprocess --quiet --output " + prefix + " " + (dir / "old.txt").string()).exit_code, 0);
  const auto before = snapshot(dir, "out");
  ASSERT_EQ(before.size(), 3u);  // .bin, .idx, .tokenizer.json
  const std::string gpt2 = kSource + "/tests/data/gpt2-tiny/";
  const std::string replace = kBin + "/preprocess --quiet --output " + prefix + " --tokenizer gpt2 --vocab " + gpt2 +
                              "vocab.json --merges " + gpt2 + "merges.txt " + (dir / "new.jsonl").string();
  int64_t steps = 0;
  for (int64_t n = 1; steps == 0; ++n) {
    ASSERT_LT(n, 100) << "more steps than expected";
    const Result r = run("TRIDENT_FAULT_AT=" + std::to_string(n) + " " + replace);
    if (r.exit_code == 0) {
      steps = n - 1;
      break;
    }
    EXPECT_EQ(r.exit_code, 2) << n << "\n" << r.output;
    EXPECT_EQ(count(r.output, "\n"), 1) << n << "\n" << r.output;
    EXPECT_NE(r.output.find("Input/output error"), std::string::npos) << n << "\n" << r.output;
    EXPECT_EQ(snapshot(dir, "out"), before) << "failed at step " << n << ": " << r.output;
  }
  EXPECT_GE(steps, 25);  // five files, the journal, links and renames
  const auto after = snapshot(dir, "out");
  EXPECT_EQ(after.size(), 5u);  // and .vocab.json, .merges.txt
  EXPECT_NE(after.at("out.bin"), before.at("out.bin"));

  for (int64_t n = 1; n <= steps; ++n) {
    restore(dir, "out", before);
    const Result killed = run("TRIDENT_FAULT_AT=" + std::to_string(n) + ":kill " + replace);
    EXPECT_TRUE(killed.exit_code == 137 || killed.exit_code == -1) << n << "\n" << killed.output;
    const Result next = run("TRIDENT_FAULT_AT=1 " + replace);
    EXPECT_EQ(next.exit_code, 2) << n << "\n" << next.output;
    EXPECT_EQ(snapshot(dir, "out"), before) << "killed at step " << n << ", then failed at the first: " << next.output;
  }
  // The next run puts the older dataset back even when it fails on its own arguments.
  restore(dir, "out", before);
  ASSERT_NE(run("TRIDENT_FAULT_AT=" + std::to_string(steps) + ":kill " + replace).exit_code, 0);
  const Result wrong = run(kBin + "/preprocess --quiet --output " + prefix + " --tokenizer gpt2 " +
                           (dir / "new.jsonl").string());
  EXPECT_NE(wrong.output.find("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt"), std::string::npos)
      << wrong.output;
  EXPECT_EQ(snapshot(dir, "out"), before) << "killed at the last step, then a run failed on its arguments";
  restore(dir, "out", before);
  ASSERT_EQ(run("TRIDENT_FAULT_AT=" + std::to_string(steps) + ":kill " + replace).exit_code != 0, true);
  EXPECT_EQ(run(replace).exit_code, 0);
  EXPECT_EQ(snapshot(dir, "out"), after);
}

// A blend of two datasets validates each: the log and the metrics give each dataset's loss
// beside the blend's, which weighs them as the blend does.
TEST(TrainProgram, ABlendValidatesEachDataset) {
  const auto dir = scratch_dir();
  const std::string gpl = (dir / "gpl").string(), lgpl = (dir / "lgpl").string();
  for (const auto& [prefix, file] : {std::pair{gpl, "GPL-3"}, std::pair{lgpl, "LGPL-2.1"}}) {
    Result r = run(kBin + "/preprocess --quiet --output " + prefix + " /usr/share/common-licenses/" + file);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const std::string metrics = (dir / "metrics.jsonl").string();
  Result r = run(kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml train.iters=2 train.eval_interval=2 " +
                 "train.eval_iters=1 data.valid_fraction=0.1 train.metrics_file=" + metrics + " data.path='0.25 " +
                 gpl + " 0.75 " + lgpl + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a blend of 2 datasets: 0.25 x " + gpl + ".bin"), std::string::npos) << r.output;
  const std::string line = trident::split(trident::read_text_file(metrics, "metrics"), '\n').back();
  const auto json = nlohmann::json::parse(line);
  const double blended = json.at("valid_loss"), first = json.at("valid_loss/" + gpl), second = json.at("valid_loss/" + lgpl);
  EXPECT_NEAR(blended, 0.25 * first + 0.75 * second, 1e-7) << line;  // printed to 9 digits
  EXPECT_NE(first, second);
  EXPECT_NE(r.output.find("| valid_loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(" + gpl + " "), std::string::npos) << r.output;
}

TEST(TrainProgram, DryRunPrintsLayoutAndFlops) {
  Result r = run("OMPI_COMM_WORLD_SIZE=32 OMPI_COMM_WORLD_RANK=0 " + kBin + "/train --config " +
                 kSource + "/configs/gpt1.7b.yaml --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world 32 = TP 1 x PP 1 x DP 32, 1 micro-batches"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("parameters: 1.65 G"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory per GPU (estimate): weights 3.08 GiB, grads 6.16 GiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recommended: TP 1 x PP 1 x DP 32"), std::string::npos) << r.output;
  r = run("OMPI_COMM_WORLD_SIZE=32 OMPI_COMM_WORLD_RANK=0 " + kBin + "/train --config " + kSource +
          "/configs/gpt1.7b.yaml --dry-run parallel.tensor=2 parallel.context=2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world 32 = TP 2 x CP 2 x PP 1 x DP 8, 4 micro-batches"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("+ CP "), std::string::npos) << r.output;
}

// The Llama 3 configs at their layouts' sizes: the released parameter counts, and their layouts
// fit an H100 by plan's estimate.
TEST(TrainProgram, DryRunAndPlanTakeTheLlamaThreeConfigs) {
  const std::pair<std::string, std::string> configs[] = {{"llama3-8b", "64 = TP 2 x PP 1 x DP 32"},
                                                         {"llama3-70b", "512 = TP 4 x CP 2 x PP 4 x DP 16"},
                                                         {"llama3-405b", "16384 = TP 8 x CP 2 x PP 16 x DP 64"}};
  const char* parameters[] = {"parameters: 8.03 G", "parameters: 70.6 G", "parameters: 406 G"};
  for (size_t i = 0; i < 3; ++i) {
    const auto& [name, layout] = configs[i];
    const std::string world = layout.substr(0, layout.find(' '));
    Result r = run("OMPI_COMM_WORLD_SIZE=" + world + " OMPI_COMM_WORLD_RANK=0 " + kBin + "/train --config " + kSource +
                   "/configs/" + name + ".yaml --dry-run");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("world " + layout), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(parameters[i]), std::string::npos) << r.output;
    r = run(kBin + "/plan --config " + kSource + "/configs/" + name + ".yaml --gpus " + world + " --device h100 --explain");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("# fits in 80 GiB"), std::string::npos) << r.output;
  }
  const Result r = run(kBin + "/plan --largest --gpus 8 --config " + kSource + "/configs/llama3-8b.yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: --largest sizes standard GPT shapes, but the config's model.normalization=rmsnorm "
                          "is not GPT-2's architecture"),
            std::string::npos) << r.output;
}

// Context parallelism divides the activations: measured on this CPU (bytes in use after one
// forward pass, tools/activation_memory) at c = 1 and 2 with selective recompute, half the
// tokens hold half the memory, and the estimate of core/plan/memory.h is within 15% of each.
TEST(ActivationMemoryProgram, ContextParallelHalvesTheMeasuredActivations) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's, whose heap activation_memory measures";
#endif
  const bool mpi = trident::testing::missing_backend(trident::testing::kMpirun).empty();
  if (!mpi) GTEST_SKIP() << "needs mpirun";
  auto measure = [&](int c) {
    const Result r = run(trident::testing::kMpirun + std::to_string(c) + " " + kBin + "/activation_memory --config " +
                         kSource + "/configs/gpt-tiny.yaml model.seq_length=512 batch.micro_batch_size=1 " +
                         "recompute=selective parallel.context=" + std::to_string(c));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    // "| layout | sequence | tokens per rank | measured (MiB) | estimate (MiB) |\n": 7 cells
    std::vector<std::string> cells;
    std::stringstream row(r.output);
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    EXPECT_EQ(cells.size(), 7u) << r.output;
    return cells.size() == 7u ? std::pair{std::stod(cells[4]), std::stod(cells[5])} : std::pair{0.0, 1.0};
  };
  const auto [whole, whole_estimate] = measure(1);
  const auto [half, half_estimate] = measure(2);
  EXPECT_NEAR(half / whole, 0.5, 0.05);
  EXPECT_NEAR(whole / whole_estimate, 1.0, 0.15);
  EXPECT_NEAR(half / half_estimate, 1.0, 0.15);
}

TEST(PlanProgram, PrintsTheRuleOfThumbAndWritesJson) {
  const auto dir = scratch_dir();
  const std::string json = (dir / "plan.json").string();
  Result r = run(kBin + "/plan --size 1t --rows 3 --json " + json);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("recommended: TP 8 x PP 64 x DP 6, micro-batch 1, recompute full"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the rule of thumb picks the same TP and PP"), std::string::npos) << r.output;
  std::ifstream in(json);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("{\"parameters\": ", 0), 0u) << text.substr(0, 200);

  r = run(kBin + "/plan --size 2t");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--size: expected one of 1.7b, 3.6b, 7.5b, 18b, 39b, 76b, 145b, 310b, 530b, 1t, got '2t'"),
            std::string::npos) << r.output;
}

// The profile's links, overridden one by one, and the software, printed in the plan; a software
// name it does not know is one error listing those it does.
TEST(PlanProgram, LinksAndSoftwareAreTheUsersToChoose) {
  Result r = run(kBin + "/plan --size 39b --device h100 --inter-node-gbs 100 --software megatron-core --explain "
                 "parallel.sequence_parallel=true");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("# 512 x H100 80GB SXM (80 GiB, 989 TFLOP/s peak, multiplies at 640), 8 per node, links 450 "
                          "GB/s within a node, 100 between nodes per GPU, 50 to the host; software megatron-core"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("overlapped with the multiplies"), std::string::npos) << r.output;
  r = run(kBin + "/plan --size 39b --device h100 --gpus-per-node 4 --intra-node-gbs 200 --host-link-gbs 20 --rows 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 per node, links 200 GB/s within a node, 50 between nodes per GPU, 20 to the host"),
            std::string::npos) << r.output;
  // The GPU's own name, as nvidia-smi prints it, picks its built-in profile (scripts/gpu_report).
  r = run(kBin + "/plan --size 1.7b --device 'NVIDIA H200' --rows 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("x H200 141GB SXM (140 GiB"), std::string::npos) << r.output;
  // Validation plans each published run on its own device and software: it takes no other option.
  r = run(kBin + "/plan --validate --device h100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--device excludes --validate"), std::string::npos) << r.output;
  r = run(kBin + "/plan --size 39b --software deepspeed");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--software: expected one of trident, megatron-2021, megatron-core, llama3, torchtitan, llm-foundry, got 'deepspeed'"),
            std::string::npos) << r.output;
  // software.NAME=VALUE among the overrides sets one thing of the software; a name or value it
  // does not know is one line naming it, before any planning.
  r = run(kBin + "/plan --size 7.5b --device h100 --software torchtitan --explain software.fp8=true software.compile=true");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("software torchtitan (flash attention"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("element-wise work fused, FP8 multiplies"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("linear multiplies in FP8 at 1400 TFLOP/s"), std::string::npos) << r.output;
  r = run(kBin + "/plan --size 7.5b software.fp9=true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output.rfind("error: unknown software setting 'software.fp9' (did you mean 'software.fp8'?", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = run(kBin + "/plan --size 7.5b software.overlap_tensor_comm=sometimes");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: software.overlap_tensor_comm: expected true or false, got 'sometimes'"), std::string::npos)
      << r.output;
}

// The compute benchmark's table, at toy sizes: every row present, numbers where the device can
// run the dtype.
TEST(BenchProgram, PrintsATableOfEveryBenchmark) {
  Result r = run(kBin + "/bench --quick --iters 1 --warmup 0 --device cpu --dtype fp32,bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* row : {"| matrix multiply (n 256)", "| vector multiply", "| BERT-large layer (h 64",
                          "| GPT-2 XL layer", "| T5-large encoder layer", "| T5-large decoder layer"})
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  EXPECT_NE(r.output.find("bf16 fwd+bwd |"), std::string::npos) << r.output;
}

// The machine at hand's profile: bench measures it, plan's time model takes it (the CPU has
// no tiles or waves: one SM, tiles of one element) and explains a layout with it.
TEST(BenchProgram, MeasuresAProfileThatPlanUses) {
  const auto dir = scratch_dir();
  const std::string profile = (dir / "cpu.yaml").string();
  Result r = run(kBin + "/bench --quick --iters 1 --warmup 0 --device cpu --profile " + profile);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const trident::DeviceProfile measured = trident::load_device_profile(profile);
  EXPECT_EQ(measured.name, "cpu (fp32)");
  EXPECT_GT(measured.matmul_tflops, 0);
  EXPECT_GT(measured.memory_gbs, 0);
  EXPECT_EQ(measured.sms, 1);
  EXPECT_EQ(measured.tile_m, 1);
  r = run(kBin + "/plan --config " + kSource + "/configs/gpt-tiny.yaml --gpus 1 --explain --profile " + profile);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* term : {"compute", "bubble", "tp-comm", "dp-comm", "optimizer", "total", "# memory per GPU"})
    EXPECT_NE(r.output.find(term), std::string::npos) << term << "\n" << r.output;
  EXPECT_NE(r.output.find("# 1 x cpu (fp32) ("), std::string::npos) << r.output;
}

// A checkpoint of a TP 2 run exported to Hugging Face's GPT-2 layout with its tokenizer's files;
// importing the export gives back every weight exactly, and train.init_from starts a run from it.
TEST(ExportProgram, ExportsACheckpointThatTrainingCanStartFrom) {
  const auto dir = scratch_dir();
  const std::string gpt2 = kSource + "/tests/data/gpt2-tiny/", data = (dir / "corpus").string();
  Result r = run(kBin + "/preprocess --quiet --tokenizer gpt2 --vocab " + gpt2 + "vocab.json --merges " + gpt2 +
                 "merges.txt --output " + data + " " + kSource + "/core");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpt = (dir / "ckpt").string(), out = (dir / "hf").string();
  const std::string train = kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml data.path=" + data +
                            " model.vocab_size=268 train.metrics_file= ";
  const bool mpi = trident::testing::missing_backend(trident::testing::kMpirun).empty();
  r = run((mpi ? trident::testing::kMpirun + "2 " : "") + train + "train.iters=3 optimizer.warmup_iters=1 train.checkpoint_dir=" + ckpt +
          (mpi ? " parallel.tensor=2" : ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // A failed export leaves no file (core/publication.h), nor the folder it made: every third file
  // step fails in turn (preprocess's test tries each step of the same publication).
  for (int64_t n = 1;; n += 3) {
    ASSERT_LT(n, 100) << "more steps than expected";
    r = run("TRIDENT_FAULT_AT=" + std::to_string(n) + " " + kBin + "/export --checkpoint " + ckpt + " --output " + out);
    if (r.exit_code == 0) break;
    EXPECT_EQ(r.exit_code, 2) << n << "\n" << r.output;
    EXPECT_NE(r.output.find("Input/output error"), std::string::npos) << n << "\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(out)) << n << "\n" << r.output;
  }
  trident::remove_tree(out);  // the run that no fault reached
  r = run(kBin + "/export --checkpoint " + ckpt + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model.safetensors, config.json, vocab.json, merges.txt"), std::string::npos) << r.output;
  EXPECT_EQ(trident::read_text_file(out + "/merges.txt", "merges"), trident::read_text_file(gpt2 + "merges.txt", "merges"));
  const auto tiny = Config::parse(trident::read_text_file(kSource + "/configs/gpt-tiny.yaml", "config"), {"model.vocab_size=268"});
  const auto saved = trident::read_global_weights(trident::CheckpointStore(ckpt).path(3));
  const auto imported = trident::read_hf_gpt2(out, tiny.model);
  ASSERT_EQ(imported.size(), saved.size());
  for (const auto& [name, value] : imported) {
    const auto& want = saved.at(name);
    EXPECT_TRUE(torch::equal(value, name == "wte.weight" ? want.narrow(0, 0, 268) : want)) << name;
  }

  r = run(kBin + "/export --checkpoint " + ckpt + " --output " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: --output '" + out + "' already holds model.safetensors"), std::string::npos) << r.output;

  // From the export: a clearly better first loss than a fresh model's.
  auto first_loss = [](const Result& run) {
    double loss = 0;
    const size_t at = run.output.find("| loss ");
    EXPECT_TRUE(at != std::string::npos && std::sscanf(run.output.c_str() + at, "| loss %lf", &loss) == 1) << run.output;
    return loss;
  };
  const Result fresh = run(train + "train.iters=1");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  r = run(train + "train.iters=1 train.init_from=" + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("initialized the weights from train.init_from '" + out + "'"), std::string::npos) << r.output;
  EXPECT_LT(first_loss(r), first_loss(fresh) - 0.3) << r.output << fresh.output;
  r = run(train + "train.iters=1 model.hidden_size=64 train.init_from=" + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has n_embd=128 but model.hidden_size asks for 64"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << r.output;
}

// The long steps say what they do and how far along they are, on a terminal only (`script` gives
// the programs one): the first iteration, a checkpoint's save and load, an export and a Hugging
// Face import each draw their line and clear it; through a pipe, none does. A delay that is not
// seconds is one error naming the variable.
TEST(TrainProgram, LongStepsShowTheirProgressOnATerminalOnly) {
  if (run("command -v script").exit_code != 0) GTEST_SKIP() << "script (util-linux) is not installed";
  const auto dir = scratch_dir();
  const std::string ckpt = (dir / "ckpt").string(), hf = (dir / "hf").string();
  // Every step's line from its start, not half a second in: the steps of a tiny model are quick.
  const auto on_terminal = [](const std::string& command) {
    return run("script -qec 'TRIDENT_PROGRESS_DELAY_S=0 " + command + "' /dev/null");
  };
  // The step's line is drawn ("\r" then the line) and later cleared ("\r" then erase-line).
  const auto drawn_and_cleared = [](const Result& r, const std::string& line) {
    const size_t drawn = r.output.find("\r" + line);
    return drawn != std::string::npos && r.output.find("\r\x1b[K", drawn) != std::string::npos;
  };
  const std::string train = kBin + "/train --config " + kSource +
                            "/configs/gpt-tiny.yaml data.type=synthetic train.metrics_file= train.checkpoint_dir=" + ckpt;
  Result r = on_terminal(train + " train.iters=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(drawn_and_cleared(r, "first iteration (warm-up): 0 s\x1b[K")) << r.output;
  EXPECT_TRUE(drawn_and_cleared(r, "saving checkpoint " + ckpt + "/")) << r.output;
  r = on_terminal(train + " train.iters=3 train.resume=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string step : {"loading weights from " + ckpt + "/iter_0000002: 0%, 0 of ",
                                 "loading optimizer state from " + ckpt + "/iter_0000002: 0%"})
    EXPECT_TRUE(drawn_and_cleared(r, step)) << step << "\n" << r.output;
  r = on_terminal(kBin + "/export --checkpoint " + ckpt + " --output " + hf);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(drawn_and_cleared(r, "writing " + hf + "/model.safetensors: 0%, 0 B of ")) << r.output;
  r = on_terminal(kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml data.type=synthetic train.iters=1 " +
                  "train.metrics_file= train.init_from=" + hf);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(drawn_and_cleared(r, "reading Hugging Face weights from " + hf + ": 0 s")) << r.output;

  // Through a pipe: the same steps, without a line drawn.
  r = run("TRIDENT_PROGRESS_DELAY_S=0 " + train + " train.iters=4 train.resume=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  for (const std::string bad : {"later", "nan", "-1"}) {
    r = run("TRIDENT_PROGRESS_DELAY_S=" + bad + " " + train + " train.iters=5 train.resume=true");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(r.output.find("TRIDENT_PROGRESS_DELAY_S='" + bad + "': expected seconds, 0 or more") !=
                std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("iter "), std::string::npos) << "before training\n" << r.output;
  }
}

namespace {

// The alphabet, 8 times over.
const std::string kAlphabet = [] {
  std::string alphabet;
  for (int i = 0; i < 8; ++i) alphabet += "abcdefghijklmnopqrstuvwxyz";
  return alphabet;
}();

// Trains `config` (a file of configs/) on the alphabet for 30 iterations at TP 2 x PP 2 (one
// process without mpirun), checkpoints in <dir>/ckpt, and returns the checkpoint directory.
std::string train_on_the_alphabet(const std::filesystem::path& dir, const std::string& config) {
  const std::string data = (dir / "abc").string(), ckpt = (dir / "ckpt").string();
  trident::testing::write_documents(data, std::vector<std::string>(40, kAlphabet + "\n"));
  trident::byte_tokenizer()->save(data);
  const bool mpi = trident::testing::missing_backend(trident::testing::kMpirun).empty();
  Result r = run((mpi ? trident::testing::kMpirun + "4 " : "") + kBin + "/train --config " + kSource + "/configs/" +
                 config + " data.path=" + data +
                 " model.num_layers=2 model.hidden_size=64 model.seq_length=32 train.iters=30 optimizer.warmup_iters=5"
                 " batch.micro_batch_size=4 data.valid_fraction=0 train.eval_interval=0 train.metrics_file= "
                 "train.checkpoint_dir=" + ckpt + (mpi ? " parallel.tensor=2 parallel.pipeline=2" : ""));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return ckpt;
}

}  // namespace

// A model trained at TP 2 x PP 2 on the alphabet continues it: generate assembles the whole
// model in one process from the pieces, from the checkpoint directory or one of its folders.
TEST(GenerateProgram, ContinuesTextWithAModelOfAnyLayout) {
  const auto dir = scratch_dir();
  const std::string alphabet = kAlphabet, ckpt = train_on_the_alphabet(dir, "gpt-tiny.yaml");
  Result r;

  const std::string generate = kBin + "/generate --prompt abcdefgh --max-tokens 10 ";
  auto text_of = [](const std::string& command) { return run("{ " + command + " 2>/dev/null; }").output; };
  EXPECT_EQ(text_of(generate + "--temperature 0 --checkpoint " + ckpt), "abcdefghijklmnopqr\n");
  r = run(generate + "--temperature 0 --checkpoint " + trident::CheckpointStore(ckpt).path(30));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("generated 10 tokens in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(iteration 30), byte-level (256 ids)"), std::string::npos) << r.output;
  const std::string sampled = generate + "--seed 9 --checkpoint " + ckpt;
  EXPECT_EQ(text_of(sampled), text_of(sampled));

  // --logits: the prompt's ids (a byte-level model's are its bytes) and a row of logits for
  // each, whose last row's most likely id is the letter after the prompt.
  const std::string logits = (dir / "logits.safetensors").string();
  r = run(generate + "--temperature 0 --checkpoint " + ckpt + " --logits " + logits);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const trident::SafetensorsFile scores(logits);
  const auto ids = scores.read("input_ids"), rows = scores.read("logits");
  EXPECT_TRUE(torch::equal(ids, torch::arange(int64_t('a'), int64_t('i'), torch::kLong))) << ids;
  ASSERT_EQ(rows.sizes(), torch::IntArrayRef({8, 256}));
  EXPECT_EQ(rows.scalar_type(), torch::kFloat);
  EXPECT_EQ(rows[7].argmax().item<int64_t>(), int64_t('i'));
  r = run(kBin + "/generate --prompt " + alphabet.substr(0, 33) + " --checkpoint " + ckpt + " --logits " + logits);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: --logits: the prompt is 33 tokens, more than the model's model.seq_length=32"),
            std::string::npos) << r.output;

  r = run(generate + "--temperature -1 --checkpoint " + ckpt);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: --temperature: expected a number >= 0, got '-1'"), std::string::npos) << r.output;
  r = run(generate + "--checkpoint " + ckpt + " --dataset " + (dir / "nothing").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("nothing' records no tokenizer"), std::string::npos) << r.output;
  r = run(generate + "--checkpoint " + dir.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("is neither a checkpoint (no manifest.json) nor a checkpoint directory"), std::string::npos)
      << r.output;
  // A run on synthetic tokens has no tokenizer to decode with: --dataset names one.
  const std::string synthetic = (dir / "synthetic").string();
  ASSERT_EQ(run(kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml data.type=synthetic model.num_layers=1 "
                "train.iters=1 train.metrics_file= train.checkpoint_dir=" + synthetic).exit_code, 0);
  r = run(generate + "--checkpoint " + synthetic);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: checkpoint '" + synthetic + "/iter_0000001' was trained on data.type=synthetic, "
                          "which has no tokenizer: pass --dataset PREFIX, a dataset whose tokenizer fits its "
                          "model.vocab_size=256"), std::string::npos) << r.output;
}

// The same with a Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied head) trained
// at TP 2 x PP 2; export writes it as Hugging Face's LlamaForCausalLM, which train.init_from
// reads back (tests/hf_interop checks both with transformers itself).
TEST(GenerateProgram, ContinuesTextWithALlamaThatExportsAsLlama) {
  const auto dir = scratch_dir();
  const std::string ckpt = train_on_the_alphabet(dir, "llama-tiny.yaml"), hf = (dir / "hf").string();
  auto r = run("{ " + kBin + "/generate --prompt abcdefgh --max-tokens 10 --temperature 0 --checkpoint " + ckpt +
               " 2>/dev/null; }");
  EXPECT_EQ(r.output, "abcdefghijklmnopqr\n");
  r = run(kBin + "/export --checkpoint " + ckpt + " --output " + hf);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(trident::read_text_file(hf + "/config.json", "config").find("\"LlamaForCausalLM\""), std::string::npos);
  const auto saved = trident::read_global_weights(trident::CheckpointStore(ckpt).path(30));
  const auto config = Config::parse(trident::read_text_file(kSource + "/configs/llama-tiny.yaml", "config"),
                                    {"model.num_layers=2", "model.hidden_size=64", "model.seq_length=32"});
  const auto imported = trident::read_hugging_face(hf, config.model);
  ASSERT_EQ(imported.size(), saved.size());
  for (const auto& [name, value] : imported) EXPECT_TRUE(torch::equal(value, saved.at(name))) << name;
  // A model neither format holds is refused by name before anything is written.
  r = run(kBin + "/train --config " + kSource + "/configs/llama-tiny.yaml model.normalization=layernorm "
          "train.init_from=" + hf + " --dry-run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: train.init_from reads Hugging Face models, but their formats cannot hold this "
                          "model: model.position_embedding_type=rope is not gpt2's, model.normalization=layernorm is "
                          "not llama's"),
            std::string::npos) << r.output;
}

// A picture of a run from its metrics: a resumed run's repeated iteration counts once (the later
// line), validation losses and MFU get their curves, an incomplete last line is skipped.
TEST(PlotProgram, DrawsTheMetricsOfARun) {
  if (run("command -v gnuplot").exit_code != 0) GTEST_SKIP() << "gnuplot is not installed";
  const auto dir = scratch_dir();
  const std::string metrics = (dir / "metrics.jsonl").string(), script = (dir / "plot.gp").string();
  std::ofstream(metrics) << R"({"iteration": 1, "loss": 5.5, "tokens_per_s": 900, "tflops_6pd": 0.1, "tflops_model": 0.12, "mfu": 0.25}
{"iteration": 2, "loss": 4.0, "tokens_per_s": 1000, "tflops_6pd": 0.1, "tflops_model": 0.12, "mfu": 0.25}
{"iteration": 2, "loss": 4.5, "tokens_per_s": 1000, "tflops_6pd": 0.1, "tflops_model": 0.12, "mfu": 0.25, "valid_loss": 4.75}
{"iteration": 3, "loss": 4.)";
  Result r = run(kBin + "/plot --metrics " + metrics + " --script " + script);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: line 4 of '" + metrics + "' is incomplete"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote " + (dir / "metrics.png").string() + ": 2 iterations (1 to 2)"), std::string::npos)
      << r.output;
  EXPECT_EQ(trident::read_text_file((dir / "metrics.png").string(), "png").substr(1, 3), "PNG");
  const std::string gp = trident::read_text_file(script, "script");
  EXPECT_NE(gp.find("$loss1 << EOD\n1 5.5\n2 4.5\nEOD\n$valid1 << EOD\n2 4.75\nEOD\n"), std::string::npos) << gp;
  EXPECT_NE(gp.find("$mfu1 << EOD\n1 25\n2 25\nEOD"), std::string::npos) << gp;
  EXPECT_NE(gp.find("set multiplot layout 3,1"), std::string::npos) << "no memory panel without a measurement";
  EXPECT_EQ(gp.find("GPU memory"), std::string::npos) << gp;

  std::ofstream(metrics) << "{\"iteration\": 1, \"loss\": 5}\nnot json\n{\"iteration\": 3, \"loss\": 4}\n";
  r = run(kBin + "/plot --metrics " + metrics);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: metrics file '" + metrics + "' line 2 is not a JSON object with an iteration"),
            std::string::npos) << r.output;
  std::ofstream(metrics, std::ios::trunc).flush();
  r = run(kBin + "/plot --metrics " + metrics);
  EXPECT_NE(r.output.find("error: metrics file '" + metrics + "' holds no iterations"), std::string::npos) << r.output;
}

// Runs side by side: each run's curves in its colour under its folder's name, against tokens
// (each line's tokens/s times its iteration time, over the iterations since the line before) or
// time; a validation line between log lines takes the next line's rate; the memory panel where
// a run measured it. Bad input: labels that do not match the runs, several runs without
// --output, an axis the lines cannot give.
TEST(PlotProgram, ComparesRunsAgainstTokensAndTime) {
  if (run("command -v gnuplot").exit_code != 0) GTEST_SKIP() << "gnuplot is not installed";
  const auto dir = scratch_dir();
  std::filesystem::create_directories(dir / "bf16");
  std::filesystem::create_directories(dir / "fp8");
  const std::string a = (dir / "bf16" / "metrics.jsonl").string(), b = (dir / "fp8" / "metrics.jsonl").string();
  const std::string png = (dir / "both.png").string(), script = (dir / "both.gp").string();
  // Logged every 2 iterations: 2 x 1000 tok/s x 0.5 s = 1000 tokens per line.
  std::ofstream(a) << R"({"iteration": 2, "loss": 5.0, "tokens_per_s": 1000, "elapsed_ms": 500, "tflops_model": 0.1}
{"iteration": 3, "valid_loss": 4.9}
{"iteration": 4, "loss": 4.0, "tokens_per_s": 1000, "elapsed_ms": 500, "tflops_model": 0.1}
)";
  std::ofstream(b) << R"({"iteration": 2, "loss": 5.1, "tokens_per_s": 2000, "elapsed_ms": 250, "tflops_model": 0.2, "memory/peak_allocated_gib": 3.5}
{"iteration": 4, "loss": 4.2, "tokens_per_s": 2000, "elapsed_ms": 250, "tflops_model": 0.2, "memory/peak_allocated_gib": 3.5}
)";
  Result r = run(kBin + "/plot --metrics " + a + " --metrics " + b + " --x tokens --output " + png + " --script " + script);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + png + ": bf16, 3 iterations (2 to 4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote " + png + ": fp8, 2 iterations (2 to 4)"), std::string::npos) << r.output;
  EXPECT_EQ(trident::read_text_file(png, "png").substr(1, 3), "PNG");
  std::string gp = trident::read_text_file(script, "script");
  EXPECT_NE(gp.find("$loss1 << EOD\n1000 5\n2000 4\nEOD\n$valid1 << EOD\n1500 4.9\nEOD\n"), std::string::npos) << gp;
  EXPECT_NE(gp.find("$loss2 << EOD\n1000 5.1\n2000 4.2\nEOD"), std::string::npos) << gp;
  EXPECT_NE(gp.find("$memory2 << EOD\n1000 3.5\n2000 3.5\nEOD"), std::string::npos) << gp;
  EXPECT_NE(gp.find("set multiplot layout 4,1"), std::string::npos) << gp;
  EXPECT_NE(gp.find("title \"bf16 training\""), std::string::npos) << gp;
  EXPECT_NE(gp.find("lc 2 title \"fp8 training\""), std::string::npos) << gp;
  EXPECT_EQ(gp.find("fp8 validation"), std::string::npos) << gp;  // fp8 has no validation line
  EXPECT_NE(gp.find("set xlabel \"tokens\""), std::string::npos) << gp;

  r = run(kBin + "/plot --metrics " + a + " --metrics " + b + " --x time --label A --label B --output " + png +
          " --script " + script);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  gp = trident::read_text_file(script, "script");
  EXPECT_NE(gp.find("$loss2 << EOD\n0.5 5.1\n1 4.2\nEOD"), std::string::npos) << gp;
  EXPECT_NE(gp.find("title \"B training\""), std::string::npos) << gp;

  r = run(kBin + "/plot --metrics " + a + " --metrics " + b + " --label A --output " + png);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("error: plot: 1 --label for 2 --metrics; give one per run or none"), std::string::npos)
      << r.output;
  r = run(kBin + "/plot --metrics " + a + " --metrics " + b);
  EXPECT_NE(r.output.find("error: plot: --output is needed with several runs (2 --metrics)"), std::string::npos)
      << r.output;
  std::ofstream(a, std::ios::trunc) << "{\"iteration\": 1, \"loss\": 5}\n";
  r = run(kBin + "/plot --metrics " + a + " --x time");
  EXPECT_NE(r.output.find("error: metrics file '" + a + "' has no elapsed_ms to place its lines by time: use --x "
                          "iteration"),
            std::string::npos) << r.output;
}
