#include <gtest/gtest.h>

#include "core/config.h"
#include "tests/helpers.h"

using trident::Config;
using trident::testing::error_of;

namespace {

constexpr const char* kSynthetic = "data:\n  type: synthetic\n";

}  // namespace

TEST(Config, ParsesSectionsAndOverrides) {
  Config c = Config::parse(std::string(kSynthetic) +
                               "model:\n  num_layers: 6\n  hidden_size: 96\n"
                               "  num_attention_heads: 3\nprecision: fp64\n",
                           {"train.iters=7", "optimizer.lr=3e-4", "model.num_layers=2"});
  EXPECT_EQ(c.model.num_layers, 2);  // the override wins over the file
  EXPECT_EQ(c.model.hidden_size, 96);
  EXPECT_EQ(c.model.ffn(), 384);
  EXPECT_EQ(c.precision, trident::Precision::fp64);
  EXPECT_EQ(c.train.iters, 7);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
}

TEST(Config, UnknownKeySuggestsClosest) {
  auto message = error_of([] { Config::parse(std::string(kSynthetic) + "model:\n  num_layer: 2\n"); });
  EXPECT_NE(message.find("unknown config key 'model.num_layer'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'model.num_layers'"), std::string::npos) << message;
  message = error_of([] { Config::parse(kSynthetic, {"optimiser.lr=1"}); });
  EXPECT_NE(message.find("did you mean 'optimizer.lr'"), std::string::npos) << message;
}

// FP8 multiplies take sizes in 16s: a config whose linear layers have others is refused with
// the size that is not, and the keys that make it.
TEST(Config, Fp8NeedsSizesInSixteens) {
  EXPECT_NO_THROW(Config::parse(kSynthetic, {"precision=fp8", "model.hidden_size=64", "model.seq_length=32"}));
  auto message = error_of([] {
    Config::parse(kSynthetic, {"precision=fp8", "model.seq_length=30", "batch.micro_batch_size=1"});
  });
  EXPECT_NE(message.find("precision=fp8 needs batch.micro_batch_size x model.seq_length / parallel.context a "
                         "multiple of 16"),
            std::string::npos) << message;
  EXPECT_NE(message.find("not 30"), std::string::npos) << message;
  message = error_of([] {
    Config::parse(kSynthetic, {"precision=fp8", "model.hidden_size=64", "model.ffn_hidden_size=72", "parallel.tensor=2"});
  });
  EXPECT_NE(message.find("model.ffn_hidden_size / parallel.tensor a multiple of 16"), std::string::npos) << message;
}

TEST(Config, WrongTypesNameTheKeyAndExpectation) {
  auto message = error_of([] { Config::parse(kSynthetic, {"model.hidden_size=big"}); });
  EXPECT_NE(message.find("'model.hidden_size': expected an integer from 1 to 1048576, got 'big'"),
            std::string::npos) << message;
  message = error_of([] { Config::parse(kSynthetic, {"precision=fp4"}); });
  EXPECT_NE(message.find("expected one of fp32, fp64, bf16, fp16, fp8"), std::string::npos) << message;
  message = error_of([] { Config::parse(kSynthetic, {"model.hidden_dropout=1.5"}); });
  EXPECT_NE(message.find("model.hidden_dropout"), std::string::npos) << message;
  message = error_of([] { Config::parse(std::string(kSynthetic) + "batch:\n  micro_batch_size: [1, 2]\n"); });
  EXPECT_NE(message.find("'batch.micro_batch_size': expected a single value"), std::string::npos)
      << message;
  message = error_of([] { Config::parse(kSynthetic, {"train.iters"}); });
  EXPECT_NE(message.find("expected section.key=value"), std::string::npos) << message;
}

TEST(Config, ImpossibleCombinationsAreRejected) {
  auto message = error_of([] { Config::parse(kSynthetic, {"model.num_attention_heads=5"}); });
  EXPECT_NE(message.find("model.hidden_size (128) must be divisible by model.num_attention_heads (5)"),
            std::string::npos) << message;
  // A head size of its own (model.kv_channels, Qwen3's) frees the hidden size from the heads.
  const Config qwen_like = Config::parse(kSynthetic, {"model.num_attention_heads=5", "model.kv_channels=32"});
  EXPECT_EQ(qwen_like.model.head_dim(), 32);
  EXPECT_EQ(qwen_like.model.attention_width(), 160);
  EXPECT_EQ(qwen_like.model.qkv_rows(), 3 * 160);
  message = error_of([] {
    Config::parse(kSynthetic, {"model.position_embedding_type=rope", "model.kv_channels=33"});
  });
  EXPECT_NE(message.find("the head size (model.kv_channels = 33) must be even"), std::string::npos) << message;
  message = error_of([] { Config::parse(kSynthetic, {"model.kv_channels=-2"}); });
  EXPECT_NE(message.find("model.kv_channels"), std::string::npos) << message;
  message = error_of([] { Config::parse(kSynthetic, {"batch.global_batch_size=10"}); });
  EXPECT_NE(message.find("batch.global_batch_size (10) must be a multiple of batch.micro_batch_size (4)"),
            std::string::npos) << message;
  message = error_of([] { Config::parse(kSynthetic, {"optimizer.min_lr=1"}); });
  EXPECT_NE(message.find("optimizer.min_lr"), std::string::npos) << message;
  message = error_of([] { Config::parse(""); });
  EXPECT_NE(message.find("data.path is empty"), std::string::npos) << message;
}

TEST(Config, FileErrorsNameTheFile) {
  auto message = error_of([] { Config::load("/nonexistent/x.yaml"); });
  EXPECT_NE(message.find("'/nonexistent/x.yaml' cannot be read"), std::string::npos) << message;
  message = error_of([] { Config::parse("model: [unclosed", {}, "bad.yaml"); });
  EXPECT_NE(message.find("bad.yaml: not valid YAML"), std::string::npos) << message;
  message = error_of([] { Config::parse("model:\n  layers: 2\n", {}, "typo.yaml"); });
  EXPECT_EQ(message.rfind("typo.yaml: unknown config key 'model.layers'", 0), 0u) << message;
}

TEST(Config, DuplicateKeysAreErrors) {
  auto message = error_of([] {
    Config::parse(std::string(kSynthetic) + "model:\n  hidden_size: 64\n  hidden_size: 32\n", {}, "dup.yaml");
  });
  EXPECT_EQ(message, "dup.yaml: config key 'model.hidden_size' appears twice (lines 4 and 5)");
  message = error_of([] { Config::parse(std::string(kSynthetic) + "train:\n  iters: 2\ntrain:\n  seed: 1\n"); });
  EXPECT_NE(message.find("config key 'train' appears twice (lines 3 and 5)"), std::string::npos) << message;
}

TEST(Config, AConfigPathThatIsNoFileIsNamed) {
  const auto dir = trident::testing::scratch_dir();
  auto message = error_of([&] { Config::load(dir.string()); });
  EXPECT_EQ(message, "config file '" + dir.string() + "' cannot be read: Is a directory");
}

// Shapes far beyond any model are refused by key, before a parameter count could overflow.
TEST(Config, AbsurdModelSizesAreRefusedByKey) {
  auto message = error_of([] { Config::parse(kSynthetic, {"model.hidden_size=1000000000000"}); });
  EXPECT_NE(message.find("'model.hidden_size': expected an integer from 1 to 1048576"), std::string::npos)
      << message;
  message = error_of([] { Config::parse(kSynthetic, {"model.num_layers=100000000"}); });
  EXPECT_NE(message.find("'model.num_layers': expected an integer from 1 to 65536"), std::string::npos)
      << message;
}

TEST(Config, ZeroStagesAreZeroToThree) {
  EXPECT_EQ(Config::parse(kSynthetic, {"parallel.zero_stage=3"}).parallel.zero_stage, 3);
  const auto message = error_of([] { Config::parse(kSynthetic, {"parallel.zero_stage=4"}); });
  EXPECT_NE(message.find("'parallel.zero_stage': expected an integer from 0 to 3, got '4'"), std::string::npos)
      << message;
}

TEST(Config, ArchitectureKeysTakeMegatronsNamesAndCheckTheirValues) {
  const Config llama = Config::parse(kSynthetic, {"model.normalization=rmsnorm", "model.position_embedding_type=rope",
                                                  "model.rope_theta=500000", "model.rope_scaling=llama3",
                                                  "model.activation=swiglu", "model.num_query_groups=2",
                                                  "model.add_bias_linear=false",
                                                  "model.untie_embeddings_and_output_weights=true"});
  EXPECT_EQ(llama.model.normalization, trident::Normalization::rmsnorm);
  EXPECT_EQ(llama.model.position_embedding_type, trident::PositionEmbeddingType::rope);
  EXPECT_EQ(llama.model.rope_scaling, trident::RopeScaling::llama3);
  EXPECT_EQ(llama.model.activation, trident::Activation::swiglu);
  EXPECT_EQ(llama.model.query_groups(), 2);
  EXPECT_EQ(llama.model.qkv_rows(), (4 + 2 * 2) * 32);
  EXPECT_EQ(llama.model.non_standard_gpt_setting(), "model.normalization=rmsnorm");
  EXPECT_EQ(Config::parse(kSynthetic).model.query_groups(), 4);  // one per head, by default
  EXPECT_EQ(Config::parse(kSynthetic).model.non_standard_gpt_setting(), "");

  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"model.normalization=batchnorm"}, "'model.normalization': expected one of layernorm, rmsnorm"},
      {{"model.position_embedding_type=alibi"}, "'model.position_embedding_type': expected one of learned, rope"},
      {{"model.activation=relu"}, "'model.activation': expected one of gelu, swiglu"},
      {{"parallel.backend=ucx"}, "'parallel.backend': expected one of auto, mpi, gloo, nccl, got 'ucx'"},
      {{"train.device=gpu"}, "'train.device': expected one of cpu, cuda, got 'gpu'"},
      {{"model.rope_theta=0"}, "'model.rope_theta'"},
      {{"model.num_query_groups=-1"}, "'model.num_query_groups': expected a positive integer, or 0"},
      {{"model.num_query_groups=3"}, "model.num_attention_heads (4) must be divisible by model.num_query_groups (3)"},
      {{"model.rope_scaling=llama3"}, "model.rope_scaling=llama3 needs model.position_embedding_type=rope"},
      {{"model.position_embedding_type=rope", "model.hidden_size=12", "model.num_attention_heads=4"},
       "the head size (model.hidden_size / model.num_attention_heads = 3) must be even"},
  };
  for (const auto& [overrides, expected] : bad) {
    const auto message = error_of([&] { Config::parse(kSynthetic, overrides); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(Config, YamlRoundTripKeepsEveryKey) {
  Config c = Config::parse(kSynthetic, {"data.path=dir with space/x:y", "train.seed=42",
                                        "optimizer.eps=1.5e-7", "parallel.sequence_parallel=true",
                                        "model.normalization=rmsnorm", "model.num_query_groups=2",
                                        "model.rope_theta=500000", "model.add_bias_linear=false"});
  Config back = Config::parse(c.to_yaml());
  for (const auto& key : Config::keys()) EXPECT_EQ(back.get(key), c.get(key)) << key;
}

TEST(Config, PaddedVocabularyFollowsMegatron) {
  trident::ModelConfig m;
  m.vocab_size = 50257;
  EXPECT_EQ(m.padded_vocab(1), 50304);  // GPT-2's vocabulary padded to a multiple of 128
  EXPECT_EQ(m.padded_vocab(8), 51200);  // multiple of 128 * 8
  m.vocab_size = 256;
  EXPECT_EQ(m.padded_vocab(1), 256);
}
