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
  message = error_of([] { resolve_layout(config({"parallel.schedule=zb-v", "parallel.pipeline=2"}), 2); });
  EXPECT_NE(message.find("parallel.schedule=zb-v runs two chunks per stage placed in a V: set "
                         "parallel.virtual_stages=2 (got 1)"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.schedule=zb-v", "parallel.virtual_stages=2"}), 1); });
  EXPECT_NE(message.find("parallel.schedule=zb-v needs parallel.pipeline >= 2"), std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.schedule=dualpipe-v", "parallel.pipeline=2",
                                                  "parallel.virtual_stages=4"}), 2); });
  EXPECT_NE(message.find("parallel.schedule=dualpipe-v runs two chunks per stage placed in a V: set "
                         "parallel.virtual_stages=2 (got 4)"),
            std::string::npos) << message;
  message = error_of([] {
    resolve_layout(config({"parallel.schedule=dualpipe-v", "parallel.pipeline=2", "parallel.virtual_stages=2",
                           "batch.micro_batch_size=2", "batch.global_batch_size=6"}),
                   2);
  });
  EXPECT_NE(message.find("parallel.schedule=dualpipe-v needs at least 2 x parallel.pipeline (4) micro-batches, but "
                         "global_batch / (micro_batch * DP) = 3 (zb-v runs fewer)"),
            std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.schedule=zb-h1", "parallel.virtual_stages=2"}), 1); });
  EXPECT_NE(message.find("parallel.schedule=interleaved_1f1b and parallel.virtual_stages > 1 go together (got zb-h1"),
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
  message = error_of([] {
    resolve_layout(config({"parallel.context=4", "parallel.tensor=2", "parallel.context_parallel_type=ulysses"}), 8);
  });
  EXPECT_NE(message.find("parallel.context_parallel_type=ulysses deals each tensor-parallel rank's 2 attention heads "
                         "(model.num_attention_heads / parallel.tensor) out to parallel.context=4 ranks"),
            std::string::npos) << message;
  EXPECT_EQ(resolve_layout(config({"parallel.context=2", "parallel.tensor=2"}), 4).ulysses_size, 1);
  // USP: Ulysses within pairs of context-parallel ranks, a ring of 2 across them.
  const std::vector<std::string> usp = {"parallel.context=4", "parallel.tensor=2",
                                        "parallel.context_parallel_type=ulysses", "parallel.ulysses_size=2"};
  const Layout both = resolve_layout(config(usp), 8);
  EXPECT_EQ(both.ulysses_size, 2);
  EXPECT_EQ(both.ring_size(), 2);
  EXPECT_EQ(describe_axes(both), "TP 2 x CP 4 (ulysses 2 x ring 2) x PP 1 x DP 1");
  EXPECT_EQ(both.context_grid().groups({"ulysses"}), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(both.context_grid().groups({"ring"}), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(describe_axes(resolve_layout(config({"parallel.context=2", "parallel.context_parallel_type=ulysses"}), 2)),
            "TP 1 x CP 2 (ulysses) x PP 1 x DP 1");
  message = error_of([] {
    resolve_layout(config({"parallel.context=4", "parallel.context_parallel_type=ulysses", "parallel.ulysses_size=3"}),
                   4);
  });
  EXPECT_NE(message.find("parallel.ulysses_size (3) must divide parallel.context (4)"), std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"parallel.context=4", "parallel.ulysses_size=2"}), 4); });
  EXPECT_NE(message.find("parallel.ulysses_size=2 is for parallel.context_parallel_type=ulysses (got ring)"),
            std::string::npos) << message;
  message = error_of([] {
    resolve_layout(config({"parallel.context=4", "parallel.tensor=2", "parallel.context_parallel_type=ulysses",
                           "parallel.ulysses_size=4"}), 8);
  });
  EXPECT_NE(message.find("out to parallel.ulysses_size=4 ranks"), std::string::npos) << message;
  message = error_of([] { config({"parallel.context_parallel_type=ulyses"}); });
  EXPECT_NE(message.find("config key 'parallel.context_parallel_type': "), std::string::npos) << message;
  EXPECT_NE(message.find("one of ring, ulysses"), std::string::npos) << message;
  message = error_of([] { resolve_layout(config({"batch.global_batch_size=8"}), 4); });
  EXPECT_NE(message.find("must be a multiple of batch.micro_batch_size * data-parallel size = 4 * 4"),
            std::string::npos) << message;
}

// The layers dealt to pipeline chunks: evenly, or with the embedding and the loss in a layer's
// slot each (the first and last chunks one layer short, possibly none).
TEST(Layout, ChunksHoldContiguousLayers) {
  auto layers = [](int64_t num_layers, int64_t chunks, bool ends) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t i = 0; i < chunks; ++i) {
      const LayerRange r = chunk_layers(num_layers, chunks, i, ends);
      out.emplace_back(r.first, r.count);
    }
    return out;
  };
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(layers(4, 2, false), (Ranges{{0, 2}, {2, 2}}));
  EXPECT_EQ(layers(4, 3, true), (Ranges{{0, 1}, {1, 2}, {3, 1}}));           // [emb L0] [L1 L2] [L3 loss]
  EXPECT_EQ(layers(4, 6, true), (Ranges{{0, 0}, {0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 0}}));  // [emb] ... [loss]
  // Llama 3 405B: 126 layers on 16 stages x 8 chunks; a stage holds its chunks c x 16 + rank.
  Layout llama = resolve_layout(
      config({"model.num_layers=126", "parallel.pipeline=16", "parallel.schedule=interleaved_1f1b",
              "parallel.virtual_stages=8", "parallel.embedding_and_loss_as_layers=true", "batch.micro_batch_size=1",
              "batch.global_batch_size=16"}),
      16);
  EXPECT_EQ(stage_layers(llama, 126, 0), 7);
  EXPECT_EQ(stage_layers(llama, 126, 1), 8);
  EXPECT_EQ(stage_layers(llama, 126, 15), 7);
  int64_t total = 0;
  for (int64_t stage = 0; stage < 16; ++stage) total += stage_layers(llama, 126, stage);
  EXPECT_EQ(total, 126);

  auto message = error_of([] { resolve_layout(config({"model.num_layers=4", "parallel.pipeline=3"}), 3); });
  EXPECT_NE(message.find("model.num_layers (4) must be divisible by parallel.pipeline * parallel.virtual_stages (3) "
                         "(or set parallel.embedding_and_loss_as_layers=true)"),
            std::string::npos) << message;
  message = error_of([] {
    resolve_layout(config({"model.num_layers=4", "parallel.pipeline=4", "parallel.embedding_and_loss_as_layers=true"}),
                   4);
  });
  EXPECT_NE(message.find("model.num_layers + 2 (6: the embedding and the loss count as layers with "
                         "parallel.embedding_and_loss_as_layers) must be divisible by parallel.pipeline * "
                         "parallel.virtual_stages (4) (or set parallel.embedding_and_loss_as_layers=false)"),
            std::string::npos) << message;
}
