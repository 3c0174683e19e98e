// export: a trident checkpoint (any layout) -> a Hugging Face GPT-2 or Llama folder.
//
//   export --checkpoint DIR --output OUT [--dtype fp32|bf16|fp16|fp64]
//
// DIR is a train.checkpoint_dir (its `latest` is exported) or one iter_NNNNNNN folder. OUT gets
// model.safetensors (GPT2LMHeadModel's or LlamaForCausalLM's names and layouts, as the model's
// architecture says: train/families/family.h; the vocabulary cut to model.vocab_size
// rows), config.json, and the dataset's tokenizer files under Hugging Face's names: vocab.json +
// merges.txt (GPT-2 BPE), tokenizer.model (SentencePiece) or tokenizer.json (a Hugging Face
// BPE), the last two with a tokenizer_config.json naming the class that reads them; a
// byte-level model's ids are its bytes and need none. Never overwrites an export.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/publication.h"
#include "core/text.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/safetensors.h"
#include "train/data/tokenizer.h"
#include "train/families/family.h"

namespace fs = std::filesystem;
using namespace trident;

namespace {

struct Options {
  std::string checkpoint, output, dtype = "fp32";
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("A trident checkpoint (any layout) -> a Hugging Face GPT-2 or Llama folder: model.safetensors, "
                  "config.json and the tokenizer's files.");
  app.add_option("--checkpoint", o.checkpoint, "a train.checkpoint_dir (its latest) or an iter_NNNNNNN folder")
      ->required();
  app.add_option("--output", o.output, "the folder to write")->required();
  app.add_option("--dtype", o.dtype, "the weights' dtype")
      ->check(checked(one_of({"fp32", "bf16", "fp16", "fp64"})))
      ->capture_default_str();
  return app;
}

torch::Dtype dtype_of(const std::string& name) {
  return name == "bf16" ? torch::kBFloat16 : name == "fp16" ? torch::kHalf : name == "fp64" ? torch::kDouble : torch::kFloat;
}

// Hugging Face's names for the tokenizer's files.
std::vector<std::string> hf_tokenizer_names(const TokenizerRecord& record) {
  if (record.type == "gpt2-bpe") return {"vocab.json", "merges.txt"};
  if (record.type == "sentencepiece") return {"tokenizer.model"};
  if (record.type == "hf-bpe") return {"tokenizer.json"};
  return {};
}

// AutoTokenizer takes the tokenizer class of config.json's model_type (gpt2: GPT2Tokenizer) unless
// tokenizer_config.json names another; given only a tokenizer.model, GPT2Tokenizer loads without
// error and drops most characters. TokenizersBackend (transformers 5) builds a BPE with byte
// fallback from the file and turns spaces into "▁", nothing else: SentencePiece's own ids for
// the models trident trains (tests/hf_interop checks them), not for a --tokenizer-model that adds
// a dummy prefix or folds spaces (settings it ignores), which gets no tokenizer_config.json.
// Given a tokenizer.json, TokenizersBackend takes it as it is; its eos_token is the token that
// ends trident's documents (tokenizer.json does not say which that is).
nlohmann::json tokenizers_backend() { return {{"tokenizer_class", "TokenizersBackend"}}; }
// Without a dummy prefix, "a" twice decodes to "aa" (with one, to "a a"); without folding, two
// spaces encode otherwise than one.
bool keeps_text_as_is(const Tokenizer& sentencepiece) {
  const std::vector<int64_t> a = sentencepiece.encode("a");
  std::vector<int64_t> twice = a;
  twice.insert(twice.end(), a.begin(), a.end());
  return sentencepiece.decode(twice) == "aa" && sentencepiece.encode("a  b") != sentencepiece.encode("a b");
}

}  // namespace

int main(int argc, char** argv) {
  fs::path made_folder;  // --output, when this run made it
  try {
    Options options;
    CLI::App app{"", "export"};
    if (!parse_command_line(describe(app, options), argc, argv)) return 0;
    progress_delay_s();  // TRIDENT_PROGRESS_DELAY_S, checked before reading the checkpoint
    const fs::path out(options.output);
    Publication::roll_back_interrupted((out / "export.publishing").string());  // an export killed while publishing
    if (fs::exists(out / "model.safetensors"))
      fail("--output '", options.output, "' already holds model.safetensors; choose another folder");
    const auto start = std::chrono::steady_clock::now();
    const std::string folder = checkpoint_folder(options.checkpoint, "--checkpoint");
    const SavedRun saved = read_saved_run(folder);
    const Config& config = saved.config;
    family_of(config.model);  // the checkpoint's model is one Hugging Face can hold
    const auto tokenizer = config.data.type == DataType::indexed ? read_tokenizer_record(config.data.path) : std::nullopt;
    const torch::Dtype dtype = dtype_of(options.dtype);

    Safetensors weights;
    weights.metadata = {{"format", "pt"}};  // Hugging Face refuses safetensors without it
    int64_t parameters = 0;
    for (auto& [name, tensor] : to_hugging_face(read_global_weights(folder), config.model, dtype)) {
      parameters += tensor.numel();
      weights.tensors.emplace_back(name, tensor);
    }
    if (!fs::exists(out)) made_folder = out;
    fs::create_directories(out);
    // Every file is written beside its place and published with the others once all are
    // complete: a failed export leaves nothing (core/publication.h), nor the folder it made.
    Publication outputs((out / "export.publishing").string());
    const auto staged = [&](const std::string& name) { return outputs.stage((out / name).string()); };
    const FileDigest written = [&] {
      Progress progress(str("writing ", (out / "model.safetensors").string()), double(tensor_bytes(weights)),
                        Progress::Unit::bytes);
      return write_safetensors(staged("model.safetensors"), weights, &progress);
    }();
    write_text_file(staged("config.json"),
                    hugging_face_config(config.model, tokenizer ? tokenizer->end_of_document : 0, dtype));
    std::vector<std::string> files = {"model.safetensors", "config.json"};
    if (tokenizer) {
      const auto names = hf_tokenizer_names(*tokenizer);
      for (size_t i = 0; i < names.size(); ++i) {
        write_text_file(staged(names[i]), read_text_file(tokenizer->files[i], "tokenizer file"));
        files.push_back(names[i]);
      }
      std::optional<nlohmann::json> tokenizer_config;
      if (tokenizer->type == "hf-bpe") {
        tokenizer_config = tokenizers_backend();
        (*tokenizer_config)["eos_token"] =
            load_dataset_tokenizer(config.data.path)->decode({tokenizer->end_of_document});
      }
      if (tokenizer->type == "sentencepiece") {
        if (keeps_text_as_is(*load_dataset_tokenizer(config.data.path))) {
          tokenizer_config = tokenizers_backend();
        } else {
          std::fprintf(stderr, "note: %s adds a dummy prefix or folds spaces, which transformers' TokenizersBackend "
                       "ignores: no tokenizer_config.json (name the tokenizer's class yourself)\n",
                       tokenizer->files[0].c_str());
        }
      }
      if (tokenizer_config) {
        write_text_file(staged("tokenizer_config.json"), tokenizer_config->dump(2) + "\n");
        files.push_back("tokenizer_config.json");
      }
    }
    outputs.publish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("exported %s (iteration %lld) to %s in %.2f s: %s (%s parameters, %sB, %s), tokenizer: %s\n",
                folder.c_str(), static_cast<long long>(saved.progress.iteration), options.output.c_str(), seconds,
                join(files, ", ").c_str(), si_units(double(parameters)).c_str(),
                si_units(double(written.bytes)).c_str(), options.dtype.c_str(),
                tokenizer ? tokenizer->describe().c_str()
                          : str("unknown (data.path '", config.data.path, "' records none)").c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::error_code ignored;
    if (!made_folder.empty()) fs::remove(made_folder, ignored);  // only when empty: the publication left nothing
    return 2;
  }
}
