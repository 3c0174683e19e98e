// generate_bench: tokens per second of generation with and without the KV cache
// (model/sampling.h), on randomly initialised models of given shapes, as a table.
//
//   build/generate_bench [--models quickstart,gpt2-small,llama-tiny] [--prompt 64] [--tokens 64] [--threads 0]
//                        [--configs configs]
//
// quickstart is the quickstart's model (configs/gpt-tiny.yaml with its 2048-id tokenizer),
// gpt2-small GPT-2's 124M shape (gpt-tiny with 12 layers, hidden 768, 12 heads, 1024 positions,
// 50257 ids), llama-tiny configs/llama-tiny.yaml's. Greedy decoding, no stop token, fp32; each run takes its
// prompt of random ids, one run of each kind untimed first.
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <vector>

#include "core/command_line.h"
#include "core/config.h"
#include "core/error.h"
#include "core/text.h"
#include "model/gpt.h"
#include "model/sampling.h"

using namespace trident;

namespace {

struct Options {
  std::vector<std::string> models = {"quickstart", "gpt2-small", "llama-tiny"};
  std::string configs = "configs";
  int64_t prompt = 64, tokens = 64, threads = 0;
};

// Each shape: a config of configs/ and overrides.
const std::map<std::string, std::pair<std::string, std::vector<std::string>>>& shapes() {
  static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> out = {
      {"quickstart", {"gpt-tiny.yaml", {"model.vocab_size=2048"}}},
      {"gpt2-small",
       {"gpt-tiny.yaml", {"model.num_layers=12", "model.hidden_size=768", "model.num_attention_heads=12",
                          "model.seq_length=1024", "model.vocab_size=50257"}}},
      {"llama-tiny", {"llama-tiny.yaml", {}}}};
  return out;
}

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Tokens per second of generation with and without the KV cache, as a table.");
  std::vector<std::string> names;
  for (const auto& [name, model] : shapes()) names.push_back(name);
  app.add_option("--models", o.models, "model shapes, comma-separated")->delimiter(',')->check(checked(one_of(names)));
  app.add_option("--configs", o.configs, "the folder of trident's configs")->capture_default_str();
  app.add_option("--prompt", o.prompt, "prompt tokens")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--tokens", o.tokens, "tokens generated")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads; 0: LibTorch's default")->check(checked(at_least(0)))
      ->capture_default_str();
  return app;
}

// Seconds to generate `tokens` after `prompt`.
double seconds_to_generate(GPT& model, const std::vector<int64_t>& prompt, int64_t vocab, int64_t tokens, bool cache) {
  SamplingOptions options;
  options.max_tokens = tokens;
  options.temperature = 0;
  options.kv_cache = cache;
  const auto start = std::chrono::steady_clock::now();
  const auto added = generate_tokens(model, vocab, prompt, options);
  TRIDENT_CHECK(int64_t(added.size()) == tokens, "generated ", added.size(), " tokens, not ", tokens);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    CLI::App app{"", "generate_bench"};
    if (!parse_command_line(describe(app, o), argc, argv)) return 0;
    if (o.threads > 0) torch::set_num_threads(int(o.threads));
    std::printf("# LibTorch %s on the CPU, %d threads, prompt %lld tokens, %lld generated\n", TORCH_VERSION,
                torch::get_num_threads(), (long long)o.prompt, (long long)o.tokens);
    std::printf("| model | parameters | tokens/s, no cache | tokens/s, KV cache | speed-up |\n| --- | --- | --- | --- | --- |\n");
    for (const auto& name : o.models) {
      const auto& [file, overrides] = shapes().at(name);
      std::vector<std::string> all = overrides;
      all.push_back("data.type=synthetic");
      const ModelConfig m = Config::load(o.configs + "/" + file, all).model;
      if (o.prompt + o.tokens > m.seq_length)
        fail("--prompt + --tokens = ", o.prompt + o.tokens, " exceeds ", name, "'s ", m.seq_length, " positions");
      GPT model(m, m.padded_vocab());
      model->initialize(1);
      int64_t parameters = 0;
      for (const auto& p : model->parameters()) parameters += p.numel();
      const auto ids = torch::randint(0, m.vocab_size, {o.prompt}, torch::kLong);
      const std::vector<int64_t> prompt(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + o.prompt);
      double rate[2];
      for (const bool cache : {false, true}) {
        seconds_to_generate(model, prompt, m.vocab_size, 2, cache);  // warm-up
        rate[cache] = double(o.tokens) / seconds_to_generate(model, prompt, m.vocab_size, o.tokens, cache);
      }
      std::printf("| %s | %s | %.1f | %.1f | %.1fx |\n", name.c_str(), si_units(double(parameters)).c_str(), rate[0],
                  rate[1], rate[1] / rate[0]);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
