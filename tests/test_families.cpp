// train/families/family.h: a model goes to the one family whose format holds it, a model none
// holds is named setting by setting, and a program adds a family of its own (the worked example
// of docs/architecture.md, "Adding a family").
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/helpers.h"
#include "train/families/family.h"

using namespace trident;
using trident::testing::error_of;

namespace {

ModelConfig llama_like() {
  ModelConfig m;
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbeddingType::rope;
  m.activation = Activation::swiglu;
  return m;
}

TEST(Families, EachModelGoesToTheFamilyThatHoldsIt) {
  EXPECT_EQ(family_of(ModelConfig{}).model_type, "gpt2");
  EXPECT_EQ(family_of(llama_like()).model_type, "llama");
  ModelConfig grouped = llama_like();
  grouped.num_query_groups = 2;  // Llama's option, not GPT-2's
  EXPECT_EQ(family_of(grouped).model_type, "llama");

  ModelConfig neither;
  neither.activation = Activation::swiglu;
  // (A family registered by the next test adds its own clause when the binary runs both.)
  EXPECT_NE(error_of([&] { family_of(neither); })
                .find("Hugging Face's formats cannot hold this model: model.activation=swiglu is not gpt2's, "
                      "model.normalization=layernorm is not llama's"),
            std::string::npos);
  Config config;
  config.model = neither;
  check_init_from(config);  // without train.init_from there is nothing to read
  config.train.init_from = "somewhere";
  EXPECT_NE(error_of([&] { check_init_from(config); })
                .find("train.init_from reads Hugging Face models, but their formats cannot hold this model: "),
            std::string::npos);
}

// A program's own family: here, a "toy" format names the tied embedding "embed" and holds the
// models of the program's block "toy_block" (and no other, whatever else runs in this process). Registered once, it is one of the families:
// the program's to_hugging_face, hugging_face_config and train.init_from reach it through
// family_of (the export program, another process, knows trident's own only).
Family toy_family() {
  Family toy;
  toy.model_type = "toy";
  toy.unheld_setting = [](const ModelConfig& m) { return m.block == "toy_block" ? "" : "model.block=" + m.block; };
  toy.to_hugging_face = [](const NamedTensors& weights, const ModelConfig&, torch::Dtype dtype) {
    return NamedTensors{{"embed", weights.at("wte.weight").to(dtype)}};
  };
  toy.config_json = [](const ModelConfig& m, int64_t, torch::Dtype) {
    return "{\"model_type\": \"toy\", \"hidden\": " + std::to_string(m.hidden_size) + "}";
  };
  toy.read = [](const std::string&, const ModelConfig&) { return NamedTensors{}; };
  return toy;
}

TEST(Families, AProgramAddsItsOwn) {
  ModelConfig toy_model;
  toy_model.block = "toy_block";
  static const bool added = [&] {  // once per process (the registry lives as long), also under --gtest_repeat
    EXPECT_NE(error_of([&] { family_of(toy_model); }).find("model.block=toy_block is not gpt2's"),
              std::string::npos);
    register_family(toy_family());
    return true;
  }();
  ASSERT_TRUE(added);
  EXPECT_EQ(family_of(toy_model).model_type, "toy");
  EXPECT_EQ(families().back().model_type, "toy");
  const auto exported = to_hugging_face({{"wte.weight", torch::ones({4, 2})}}, toy_model, torch::kHalf);
  ASSERT_EQ(exported.count("embed"), 1u);
  EXPECT_EQ(exported.at("embed").scalar_type(), torch::kHalf);
  EXPECT_EQ(hugging_face_config(toy_model, 0, torch::kFloat), "{\"model_type\": \"toy\", \"hidden\": 128}");
  EXPECT_EQ(family_of(ModelConfig{}).model_type, "gpt2");  // the families before it come first

  EXPECT_EQ(error_of([] { register_family(toy_family()); }),
            "register_family: a family with model_type 'toy' is known already");
  Family nameless = toy_family();
  nameless.model_type = "";
  EXPECT_EQ(error_of([&] { register_family(nameless); }), "register_family: the model_type is empty");
  Family partial = toy_family();
  partial.model_type = "partial";
  partial.read = nullptr;
  EXPECT_EQ(error_of([&] { register_family(partial); }),
            "register_family('partial'): every function of the family is needed");
}

}  // namespace
