// generate: text from a trained model, whatever layout trained it.
//
//   generate --checkpoint DIR --prompt TEXT [--max-tokens 100] [--temperature 0.8] [--top-k 40]
//            [--seed 1234] [--dataset PREFIX] [--device cpu|cuda] [--logits FILE] [--no-kv-cache]
//
// DIR is a train.checkpoint_dir (its `latest`) or one iter_NNNNNNN folder. The whole model is
// assembled in this one process from the checkpoint's pieces; the text goes through the
// tokenizer of the dataset the run trained on (or of --dataset). Prints the prompt and its
// continuation, which ends early at the tokenizer's end-of-document token. --logits also writes
// the prompt's ids and the model's logits at each of its positions to a safetensors file, for
// comparing the model with another implementation of it (the Hugging Face interop tests do).
// Each new token is one forward of one position over the cached keys and values
// (model/sampling.h); --no-kv-cache re-runs the whole context for every token instead.
#include <chrono>
#include <cstdio>

#include "core/command_line.h"
#include "core/error.h"
#include "model/gpt.h"
#include "model/sampling.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/safetensors.h"
#include "train/checkpoint/tensors.h"
#include "train/data/tokenizer.h"
#include "train/device.h"

using namespace trident;

namespace {

struct Options {
  std::string checkpoint, prompt, dataset, device = "cpu", logits;
  bool no_kv_cache = false;
  SamplingOptions sampling;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Text from a trained model (any layout it was trained at), through its dataset's tokenizer.");
  app.add_option("--checkpoint", o.checkpoint, "a train.checkpoint_dir (its latest) or an iter_NNNNNNN folder")
      ->required();
  app.add_option("--prompt", o.prompt, "the text to continue (empty: start a new document)")->required();
  app.add_option("--max-tokens", o.sampling.max_tokens, "tokens to add at most")
      ->check(checked(at_least(1)))->capture_default_str();
  o.sampling.temperature = 0.8;
  app.add_option("--temperature", o.sampling.temperature, "softmax temperature; 0 takes the most likely token")
      ->check(checked(non_negative_number()))->capture_default_str();
  o.sampling.top_k = 40;
  app.add_option("--top-k", o.sampling.top_k, "draw among the k most likely tokens; 0 for all")
      ->check(checked(at_least(0)))->capture_default_str();
  app.add_option("--seed", o.sampling.seed, "the draws' seed")
      ->check(checked(any<uint64_t>("a non-negative integer")))->capture_default_str();
  app.add_option("--dataset", o.dataset, "use this dataset's tokenizer instead of the run's data.path");
  app.add_option("--device", o.device, "where the model runs")
      ->check(checked(one_of(spellings<TrainDevice>())))->capture_default_str();
  app.add_flag("--no-kv-cache", o.no_kv_cache, "re-run the model over the whole context for every token");
  app.add_option("--logits", o.logits,
                 "also write the prompt's ids (input_ids, int64 [n]) and the logits at each of its positions "
                 "(logits, fp32 [n, model.vocab_size]) to this safetensors file");
  return app;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options;
    CLI::App app{"", "generate"};
    if (!parse_command_line(describe(app, options), argc, argv)) return 0;
    const std::string folder = checkpoint_folder(options.checkpoint, "--checkpoint");
    const SavedRun saved = read_saved_run(folder);
    const ModelConfig& m = saved.config.model;
    if (options.dataset.empty() && saved.config.data.type != DataType::indexed)
      fail("checkpoint '", folder, "' was trained on data.type=", saved.config.data.type, ", which has no tokenizer: ",
           "pass --dataset PREFIX, a dataset whose tokenizer fits its model.vocab_size=", m.vocab_size);
    const std::string dataset = options.dataset.empty() ? saved.config.data.path : options.dataset;
    std::unique_ptr<Tokenizer> tokenizer;
    try {
      tokenizer = load_dataset_tokenizer(dataset);
    } catch (const Error& e) {
      fail(e.what(), options.dataset.empty() ? " (--dataset PREFIX names another dataset to take the tokenizer from)" : "");
    }
    if (tokenizer->vocab_size() > m.vocab_size)
      fail("the tokenizer of '", dataset, "' (", tokenizer->describe(), ") does not fit the model's vocabulary of ",
           m.vocab_size);

    std::vector<int64_t> prompt = tokenizer->encode(options.prompt);
    if (prompt.empty()) prompt = {tokenizer->end_of_document()};
    if (!options.logits.empty() && int64_t(prompt.size()) > m.seq_length)
      fail("--logits: the prompt is ", prompt.size(), " tokens, more than the model's model.seq_length=", m.seq_length);

    const torch::Device device = training_device(spelled<TrainDevice>(options.device), 0);
    GPT model(m, m.padded_vocab());
    model->to(saved.config.precision == Precision::fp64 ? torch::kDouble : torch::kFloat);
    place_parameters(read_global_weights(folder), {parameters_with_roles(*model), {}}, str("checkpoint '", folder, "'"));
    model->to(device);

    if (!options.logits.empty()) {
      Safetensors scores;
      scores.tensors = {{"input_ids", torch::tensor(prompt, torch::kLong)},
                        {"logits", score_tokens(model, m.vocab_size, prompt)}};
      write_safetensors(options.logits, scores);
    }
    options.sampling.stop_token = tokenizer->end_of_document();
    options.sampling.kv_cache = !options.no_kv_cache;
    const auto start = std::chrono::steady_clock::now();
    // Only ids the tokenizer can decode are drawn (model.vocab_size may be larger than its vocabulary).
    const std::vector<int64_t> added = generate_tokens(model, tokenizer->vocab_size(), prompt, options.sampling);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string text = options.prompt + tokenizer->decode(added);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "generated %zu tokens in %.2f s (%.1f tokens/s%s) from %s (iteration %lld), %s\n",
                 added.size(), seconds, double(added.size()) / std::max(seconds, 1e-9),
                 options.sampling.kv_cache ? "" : ", no KV cache", folder.c_str(),
                 static_cast<long long>(saved.progress.iteration), tokenizer->describe().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
