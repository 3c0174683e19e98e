// core/layout.h: the one function that builds a run's layout from its config, and its errors.
#include <gtest/gtest.h>

#include "core/layout.h"
#include "tests/helpers.h"

using namespace trident;
using trident::testing::error_of;

namespace {

Config config(std::vector<std::string> overrides) {
  overrides.push_back("data.type=synthetic");
  return Config::parse("", overrides);
}

}  // namespace

TEST(Layout, MicroBatchesAreTheAccumulationSteps) {
  Layout layout = resolve_layout(
      config({"parallel.tensor=2", "parallel.pipeline=2", "batch.micro_batch_size=2",
              "batch.global_batch_size=16"}),
      16);
  EXPECT_EQ(layout.dp_size, 4);
  EXPECT_EQ(layout.micro_batches, 2);  // 16 / (2 * 4)
  // Context-parallel ranks share their samples: they do not divide the batch.
  layout = resolve_layout(config({"parallel.tensor=2", "parallel.context=2", "parallel.pipeline=2",
                                  "batch.micro_batch_size=2", "batch.global_batch_size=16"}),
                          16);
  EXPECT_EQ(layout.cp_size, 2);
  EXPECT_EQ(layout.dp_size, 2);
  EXPECT_EQ(layout.micro_batches, 4);  // 16 / (2 * 2)
  EXPECT_EQ(describe_axes(layout), "TP 2 x CP 2 x PP 2 x DP 2");
}

TEST(Layout, ErrorsNameTheKeys) {
  auto message = error_of([] { resolve_layout(config({"parallel.tensor=4"}), 6); });
  EXPECT_NE(message.find("world size 6 is not divisible by parallel.tensor * parallel.context * parallel.pipeline"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.data=3"}), 2); });
  EXPECT_NE(message.find("parallel.data=3 but world size 2"), std::string::npos) << message;
  message = error_of([] {
    resolve_layout(config({"parallel.pipeline=2", "parallel.schedule=interleaved_1f1b",
                           "parallel.virtual_stages=2", "batch.global_batch_size=12"}),
                   2);
  });
  EXPECT_NE(message.find("needs a multiple of parallel.pipeline (2) micro-batches"), std::string::npos)
      << message;
  message = error_of([] { resolve_layout(config({"parallel.tensor=3"}), 3); });
  EXPECT_NE(message.find("model.num_attention_heads (4) must be divisible by parallel.tensor (3)"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.virtual_stages=2"}), 1); });
  EXPECT_NE(message.find("parallel.schedule=interleaved_1f1b and parallel.virtual_stages > 1 go together"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.context=3", "model.seq_length=32"}), 3); });
  EXPECT_NE(message.find("model.seq_length (32) must be divisible by 2 * parallel.context (6)"), std::string::npos)
      << message;
  message = error_of([] {
    resolve_layout(config({"parallel.context=2", "parallel.tensor=2", "parallel.sequence_parallel=true",
                           "model.seq_length=36"}),
                   4);
  });
  EXPECT_NE(message.find("model.seq_length (36) must be divisible by 2 * parallel.context * parallel.tensor (8) "
                         "with parallel.sequence_parallel"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.context=2", "parallel.tensor=2"}), 6); });
  EXPECT_NE(message.find("world size 6 is not divisible by parallel.tensor * parallel.context * parallel.pipeline "
                         "= 2 * 2 * 1 = 4"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"model.num_query_groups=2", "parallel.tensor=4"}), 4); });
  EXPECT_NE(message.find("model.num_query_groups (2) must be divisible by parallel.tensor (4)"), std::string::npos)
      << message;
  message = error_of([] {  // a Config built in C++ has not passed Config::set's range check
    Config built = config({});
    built.parallel.zero_stage = 4;
    resolve_layout(built, 1);
  });
  EXPECT_NE(message.find("parallel.zero_stage must be 0, 1, 2 or 3 (got 4)"), std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"batch.global_batch_size=8"}), 4); });
  EXPECT_NE(message.find("must be a multiple of batch.micro_batch_size * data-parallel size = 4 * 4"),
            std::string::npos) << message;
}
