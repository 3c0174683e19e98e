// train/families/gpt2/gpt2.h: the exported weights compute, in GPT2LMHeadModel's arithmetic written out
// here independently of trident's model, the logits trident computes; reading them back gives
// the same weights at any tensor-parallel layout; a config.json that does not fit is named.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>

#include "core/files.h"
#include "model/gpt.h"
#include "tests/helpers.h"
#include "train/families/gpt2/gpt2.h"
#include "train/checkpoint/safetensors.h"
#include "train/checkpoint/tensors.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::FakeGroup;
using trident::testing::scratch_dir;
using trident::testing::tiny_model;

namespace {

GPT trained_like_model(const ModelConfig& m) {
  GPT model(m, m.padded_vocab());
  model->to(torch::kDouble);
  model->initialize(7);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(0.1 * torch::randn_like(p));  // biases and norms not at 0 and 1
  return model;
}

std::map<std::string, torch::Tensor> weights_of(const torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// GPT2LMHeadModel's forward as Hugging Face's modeling_gpt2 computes it, on its own names:
// Conv1D is x @ W + b with W [in, out]; c_attn's output splits into q | k | v, each into heads.
torch::Tensor hf_logits(const std::map<std::string, torch::Tensor>& w, const ModelConfig& m, const torch::Tensor& ids) {
  auto get = [&](const std::string& name) { return w.at("transformer." + name); };
  auto conv1d = [&](const torch::Tensor& x, const std::string& name) {
    return torch::matmul(x, get(name + ".weight")) + get(name + ".bias");
  };
  auto ln = [&](const torch::Tensor& x, const std::string& name) {
    return torch::layer_norm(x, {m.hidden_size}, get(name + ".weight"), get(name + ".bias"), m.layernorm_epsilon);
  };
  const int64_t b = ids.size(0), s = ids.size(1), heads = m.num_attention_heads, d = m.head_dim();
  auto x = get("wte.weight").index_select(0, ids.flatten()).view({b, s, -1}) + get("wpe.weight").narrow(0, 0, s);
  const auto causal = torch::ones({s, s}, torch::kBool).triu(1);
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    auto qkv = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(m.hidden_size, -1);
    auto split_heads = [&](const torch::Tensor& t) { return t.view({b, s, heads, d}).transpose(1, 2); };
    auto q = split_heads(qkv[0]), k = split_heads(qkv[1]), v = split_heads(qkv[2]);
    auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(d));
    auto context = torch::matmul(scores.masked_fill(causal, -INFINITY).softmax(-1), v);
    x = x + conv1d(context.transpose(1, 2).reshape({b, s, -1}), h + "attn.c_proj");
    auto hidden = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc");
    x = x + conv1d(torch::gelu(hidden, "tanh"), h + "mlp.c_proj");
  }
  return torch::matmul(ln(x, "ln_f"), get("wte.weight").t());
}

// An exported folder: model.safetensors (without the "transformer." prefix when `bare`) and
// config.json.
std::string export_folder(const std::map<std::string, torch::Tensor>& hf, const ModelConfig& m, bool bare = false) {
  const auto dir = scratch_dir();
  Safetensors file;
  for (const auto& [name, t] : hf) file.tensors.emplace_back(bare ? name.substr(12) : name, t);
  write_safetensors((dir / "model.safetensors").string(), file);
  write_text_file((dir / "config.json").string(), hf_gpt2_config(m, 0, torch::kDouble));
  return dir.string();
}

}  // namespace

TEST(HfGpt2, ExportedWeightsComputeTheSameLogits) {
  const ModelConfig m = tiny_model();
  GPT model = trained_like_model(m);
  const auto hf = to_hf_gpt2(weights_of(*model), m, torch::kDouble);
  EXPECT_EQ(hf.size(), 4u + 12u * size_t(m.num_layers));
  EXPECT_EQ(hf.at("transformer.wte.weight").sizes(), torch::IntArrayRef({50, 16}));      // unpadded
  EXPECT_EQ(hf.at("transformer.h.0.attn.c_attn.weight").sizes(), torch::IntArrayRef({16, 48}));  // [in, out]
  EXPECT_EQ(hf.at("transformer.h.1.mlp.c_fc.weight").sizes(), torch::IntArrayRef({16, 64}));
  // k of head 2, element 1 of its dimension 4: trident's row 2 * 12 + 4 + 1, HF's column 16 + 2 * 4 + 1.
  EXPECT_EQ(hf.at("transformer.h.0.attn.c_attn.weight")[3][25].item<double>(),
            std::dynamic_pointer_cast<BlockImpl>(model->blocks[0])->attn->qkv->weight[29][3].item<double>());

  const auto ids = torch::tensor({3, 17, 49, 0, 8, 8, 21, 5, 40, 1, 2, 3}, torch::kLong).view({2, 6});
  torch::NoGradGuard no_grad;
  model->eval();
  const auto expected = model->forward(ids).narrow(-1, 0, m.vocab_size);
  const auto got = hf_logits(hf, m, ids);
  EXPECT_LT((got - expected).abs().max().item<double>(), 1e-12 * expected.abs().max().item<double>());
}

TEST(HfGpt2, ImportGivesBackTheWeightsAtAnyTensorParallelLayout) {
  const ModelConfig m = tiny_model();
  GPT model = trained_like_model(m);
  const auto original = weights_of(*model);
  for (bool bare : {false, true}) {
    const auto read = read_hf_gpt2(export_folder(to_hf_gpt2(original, m, torch::kDouble), m, bare), m);
    EXPECT_EQ(read.size(), original.size());
    for (const auto& [name, value] : read) {
      const auto& want = original.at(name);
      EXPECT_TRUE(torch::equal(value, name == "wte.weight" ? want.narrow(0, 0, m.vocab_size) : want)) << name;
    }
    // TP 2: each rank's parts equal the original's; the padded vocabulary rows keep their own
    // fresh values.
    for (int rank = 0; rank < 2; ++rank) {
      GPT shard(m, m.padded_vocab(2), TensorParallel{std::make_shared<FakeGroup>(rank, 2)});
      shard->to(torch::kDouble);
      shard->initialize(3);
      const auto fresh = weights_of(*shard);
      const auto params = parameters_with_roles(*shard);
      place_parameters(read, {params, {rank, 2}}, "test export");
      for (const auto& p : params) {
        const int64_t dim = p.role.partition_dim;
        const auto& whole = original.at(p.name);
        if (dim < 0) {
          EXPECT_TRUE(torch::equal(p.tensor, whole)) << p.name;
        } else if (p.name == "wte.weight") {  // 64 rows per rank: 50 real ones, all on rank 0
          EXPECT_TRUE(torch::equal(p.tensor.narrow(0, 0, rank == 0 ? 50 : 0), whole.narrow(0, 0, rank == 0 ? 50 : 0)));
          EXPECT_TRUE(torch::equal(p.tensor.narrow(0, rank == 0 ? 50 : 0, rank == 0 ? 14 : 64),
                                   fresh.at(p.name).narrow(0, rank == 0 ? 50 : 0, rank == 0 ? 14 : 64)));
        } else {
          const int64_t part = p.tensor.size(dim);
          EXPECT_TRUE(torch::equal(p.tensor, whole.narrow(dim, rank * part, part))) << p.name;
        }
      }
    }
  }
}

TEST(HfGpt2, AConfigThatDoesNotFitIsNamed) {
  ModelConfig m = tiny_model();
  GPT model = trained_like_model(m);
  const std::string dir = export_folder(to_hf_gpt2(weights_of(*model), m, torch::kDouble), m);
  ModelConfig wider = m;
  wider.hidden_size = 32;
  EXPECT_NE(error_of([&] { read_hf_gpt2(dir, wider); })
                .find("config.json' has n_embd=16 but model.hidden_size asks for 32"),
            std::string::npos);
  ModelConfig smaller = m;
  smaller.vocab_size = 40;
  EXPECT_NE(error_of([&] { read_hf_gpt2(dir, smaller); }).find("has vocab_size=50 but model.vocab_size (at most) asks for 40"),
            std::string::npos);
  auto config = nlohmann::json::parse(read_text_file(dir + "/config.json", "config"));
  config["activation_function"] = "relu";
  write_text_file(dir + "/config.json", config.dump());
  EXPECT_NE(error_of([&] { read_hf_gpt2(dir, m); }).find("has activation_function=\"relu\""), std::string::npos);
  config.erase("activation_function");
  for (const auto& [key, value] : {std::pair<std::string, bool>{"scale_attn_weights", false},
                                   {"scale_attn_by_inverse_layer_idx", true}, {"tie_word_embeddings", false}}) {
    auto variant = config;
    variant[key] = value;
    write_text_file(dir + "/config.json", variant.dump());
    EXPECT_NE(error_of([&] { read_hf_gpt2(dir, m); }).find(str("has ", key, "=", value ? "true" : "false", " but trident's")),
              std::string::npos) << key;
  }
  config.erase("n_layer");
  write_text_file(dir + "/config.json", config.dump());
  EXPECT_NE(error_of([&] { read_hf_gpt2(dir, m); }).find("lacks a GPT-2 key"), std::string::npos);
  config["n_layer"] = 2;
  write_text_file(dir + "/config.json", config.dump());
  Safetensors partial = read_safetensors(dir + "/model.safetensors");
  partial.tensors.pop_back();
  write_safetensors(dir + "/model.safetensors", partial);
  EXPECT_NE(error_of([&] { read_hf_gpt2(dir, m); }).find("model.safetensors' has no tensor 'transformer."),
            std::string::npos);
}
