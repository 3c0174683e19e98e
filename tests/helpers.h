// Shared test helpers: error capture, scratch directories, small datasets.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "parallel/comm/communicator.h"
#include "train/data/indexed_dataset.h"
#include "train/trainer.h"

namespace trident::testing {

// The message of the trident::Error that `body` throws; fails the test when it throws none.
template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a trident::Error";
  return "";
}

// A GPT small enough for unit tests: 2 layers, hidden 16, 4 heads, seq 8, a vocabulary of 50
// padded to 64.
inline ModelConfig tiny_model() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.seq_length = 8;
  m.vocab_size = 50;
  m.make_vocab_size_divisible_by = 64;
  return m;
}

// tiny_model as Llama: RMSNorm, RoPE, SwiGLU (ffn 40), 4 query heads in 2 key/value groups, no
// biases, an untied head.
inline ModelConfig tiny_llama() {
  ModelConfig m = tiny_model();
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbeddingType::rope;
  m.activation = Activation::swiglu;
  m.ffn_hidden_size = 40;
  m.num_query_groups = 2;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = true;
  return m;
}

// tiny_llama with 4 experts of 12 in its first layer, each token through 2, and a shared expert
// of 8 (no losses: the model's loss is the token loss alone).
inline ModelConfig tiny_moe() {
  ModelConfig m = tiny_llama();
  m.num_moe_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 12;
  m.moe_layer_freq = 2;
  m.moe_shared_expert_intermediate_size = 8;
  return m;
}

// Trains `trainer` to its end and returns every iteration's loss; `hooks` run as well.
inline std::vector<double> training_losses(Trainer& trainer, Hooks hooks = {}) {
  std::vector<double> losses;
  auto after_step = hooks.after_step;
  hooks.after_step = [&](IterationMetrics& m) {
    losses.push_back(m.loss);
    if (after_step) after_step(m);
  };
  trainer.set_hooks(hooks);
  trainer.train();
  return losses;
}

// A fresh, empty directory under the system temp dir, named after the running test.
inline std::filesystem::path scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() /
             (std::string("trident-") + info->test_suite_name() + "-" + info->name());
  trident::remove_tree(dir.string());
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes one document per entry of `documents` as a byte-level indexed dataset.
inline void write_documents(const std::string& prefix, const std::vector<std::string>& documents) {
  IndexedDatasetWriter writer(prefix, TokenType::uint8);
  for (const auto& text : documents) {
    std::vector<int64_t> tokens;
    for (unsigned char c : text) tokens.push_back(c);
    writer.add_document(tokens.data(), tokens.size());
  }
  writer.finish();
}

// A stand-in group that only knows its rank and size: enough to build a shard's shapes and
// initial values; any communication fails the test.
class FakeGroup : public Communicator {
 public:
  FakeGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "fake"; }
  void all_reduce(torch::Tensor&, ReduceOp) override { ADD_FAILURE() << "no communication"; }
  void reduce_scatter(torch::Tensor&, const torch::Tensor&, ReduceOp) override { ADD_FAILURE(); }
  void all_gather(torch::Tensor&, const torch::Tensor&) override { ADD_FAILURE(); }
  void broadcast(torch::Tensor&, int) override { ADD_FAILURE(); }
  void send(const torch::Tensor&, int) override { ADD_FAILURE(); }
  void recv(torch::Tensor&, int) override { ADD_FAILURE(); }
  void exchange(std::vector<Transfer>&) override { ADD_FAILURE(); }
  void barrier() override {}
  std::shared_ptr<Communicator> split(int, int) override { return nullptr; }

 private:
  int rank_, size_;
};

struct CommandResult {
  int exit_code;       // -1 when killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs a shell command and collects what it prints.
inline CommandResult run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace trident::testing
