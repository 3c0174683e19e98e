// preprocess: text files -> Megatron indexed dataset (.bin/.idx) through a tokenizer.
//
//   preprocess --output PREFIX [--tokenizer byte|sentencepiece|gpt2|hf] [--vocab-size N]
//              [--tokenizer-model FILE] [--vocab vocab.json --merges merges.txt]
//              [--tokenizer-json tokenizer.json]
//              [--extensions .md,.txt] [--quiet] PATH...
//
// Each file is one document: its tokens, then the tokenizer's end-of-document id. Directories
// are walked in sorted order; binary files (holding a NUL byte) and symbolic links are skipped.
// The dataset records its tokenizer in PREFIX.tokenizer.json with the tokenizer's files beside
// it (train/data/tokenizer.h); tokens are stored as uint8, uint16 or int32, the narrowest that holds
// the vocabulary. Prints the unigram entropy that a model must beat.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "train/data/indexed_dataset.h"
#include "train/data/tokenizer.h"

namespace fs = std::filesystem;
using trident::checked;
using trident::fail;
using trident::parse_command_line;
using trident::si_units;

namespace {

// SentencePiece needs 256 byte pieces, <unk> and </s>, and room for one piece of its own.
constexpr int64_t kSmallestSentencePieceVocab = 259;

struct Options {
  std::string output;
  std::string tokenizer = "byte";
  int64_t vocab_size = 0;       // sentencepiece: train one of this size
  std::string tokenizer_model;  // sentencepiece: use this .model
  std::string vocab, merges;    // gpt2
  std::string tokenizer_json;   // hf
  std::vector<std::string> extensions;  // empty: every file
  std::vector<std::string> inputs;
  bool quiet = false;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Text files -> Megatron indexed dataset (PREFIX.bin/.idx), one document per file, "
                  "through a tokenizer it records beside the dataset; prints the unigram entropy a "
                  "model must beat.");
  app.add_option("--output", o.output, "dataset prefix: writes PREFIX.bin, PREFIX.idx, PREFIX.tokenizer.json")
      ->required();
  app.add_option("--tokenizer", o.tokenizer,
                 "byte (one token per byte), sentencepiece, gpt2 or hf (a Hugging Face tokenizer.json)")
      ->check(checked(trident::one_of({"byte", "sentencepiece", "gpt2", "hf"})))
      ->capture_default_str();
  auto* vocab_size = app.add_option("--vocab-size", o.vocab_size,
                                    "sentencepiece: train a BPE model of this many ids on the inputs")
                         ->check(checked(trident::at_least(kSmallestSentencePieceVocab)));
  app.add_option("--tokenizer-model", o.tokenizer_model, "sentencepiece: use this trained .model")
      ->excludes(vocab_size);
  app.add_option("--vocab", o.vocab, "gpt2: vocab.json");
  app.add_option("--merges", o.merges, "gpt2: merges.txt");
  app.add_option("--tokenizer-json", o.tokenizer_json, "hf: a byte-level BPE's tokenizer.json (Llama 3's, Qwen's, ...)");
  app.add_option("--extensions", o.extensions, "only files with these extensions, e.g. .md,.txt")
      ->delimiter(',');
  app.add_flag("--quiet", o.quiet, "no progress bar");
  app.add_option("inputs", o.inputs, "files and directories (walked in sorted order)")->required();
  return app;
}

// Each tokenizer's options, and only those, before any file is read.
void check_tokenizer_options(const Options& o) {
  const bool sentencepiece = o.tokenizer == "sentencepiece", gpt2 = o.tokenizer == "gpt2", hf = o.tokenizer == "hf";
  if (sentencepiece && o.vocab_size == 0 && o.tokenizer_model.empty())
    fail("--tokenizer sentencepiece needs --vocab-size N (to train one) or --tokenizer-model FILE");
  if (!sentencepiece && (o.vocab_size != 0 || !o.tokenizer_model.empty()))
    fail(o.vocab_size != 0 ? "--vocab-size" : "--tokenizer-model", " is for --tokenizer sentencepiece, not ",
         o.tokenizer);
  if (gpt2 && (o.vocab.empty() || o.merges.empty()))
    fail("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt");
  if (!gpt2 && (!o.vocab.empty() || !o.merges.empty()))
    fail(!o.vocab.empty() ? "--vocab" : "--merges", " is for --tokenizer gpt2, not ", o.tokenizer);
  if (hf && o.tokenizer_json.empty()) fail("--tokenizer hf needs --tokenizer-json tokenizer.json");
  if (!hf && !o.tokenizer_json.empty()) fail("--tokenizer-json is for --tokenizer hf, not ", o.tokenizer);
}

bool wanted(const fs::path& path, const Options& o) {
  if (o.extensions.empty()) return true;
  return std::find(o.extensions.begin(), o.extensions.end(), path.extension().string()) !=
         o.extensions.end();
}

std::vector<fs::path> collect_files(const Options& o) {
  std::vector<fs::path> files;
  for (const auto& input : o.inputs) {
    fs::path path(input);
    if (fs::is_symlink(path)) continue;
    if (fs::is_regular_file(path)) {
      files.push_back(path);
    } else if (fs::is_directory(path)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::recursive_directory_iterator(path))
        if (entry.is_regular_file() && !entry.is_symlink() && wanted(entry.path(), o))
          found.push_back(entry.path());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      fail("input '", input, "' is neither a file nor a directory");
    }
  }
  return files;
}

// A document is a non-empty text file; binary files (a NUL byte) are skipped.
bool is_document(const std::string& text) { return !text.empty() && text.find('\0') == std::string::npos; }

std::vector<std::string> documents_among(const std::vector<fs::path>& files) {
  std::vector<std::string> documents;
  for (const auto& file : files)
    if (is_document(trident::read_text_file(file.string(), "input"))) documents.push_back(file.string());
  return documents;
}

std::unique_ptr<trident::Tokenizer> make_tokenizer(const Options& o, const std::vector<fs::path>& files) {
  if (o.tokenizer == "gpt2") return trident::load_gpt2_bpe(o.vocab, o.merges);
  if (o.tokenizer == "hf") return trident::load_hf_tokenizer(o.tokenizer_json);
  if (o.tokenizer == "byte") return trident::byte_tokenizer();
  if (!o.tokenizer_model.empty()) return trident::load_sentencepiece(o.tokenizer_model);
  const auto documents = documents_among(files);
  if (documents.empty()) fail("no documents to train a tokenizer on: all input files are empty or binary");
  if (!o.quiet) std::fprintf(stderr, "training a SentencePiece BPE tokenizer of %lld ids on %zu files...\n",
                             static_cast<long long>(o.vocab_size), documents.size());
  const auto start = std::chrono::steady_clock::now();
  auto tokenizer = trident::train_sentencepiece(documents, o.vocab_size);
  std::printf("trained a SentencePiece BPE tokenizer of %lld ids on %zu files in %.2f s\n",
              static_cast<long long>(o.vocab_size), documents.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return tokenizer;
}

// A one-line progress bar with throughput, redrawn in place on a terminal, every 10% otherwise.
class Progress {
 public:
  Progress(size_t total, bool quiet) : total_(total), quiet_(quiet), tty_(isatty(2)) {}
  void update(size_t done, int64_t bytes, int64_t tokens) {
    if (quiet_ || total_ == 0) return;
    int percent = int(100 * done / total_);
    if (!tty_ && percent / 10 == last_ / 10 && done != total_) return;
    if (percent == last_ && done != total_) return;
    last_ = percent;
    std::string bar(size_t(percent / 4), '#');
    bar.resize(25, ' ');
    std::fprintf(stderr, "%s[%s] %3d%% %zu/%zu files, %sB, %s tokens, %s tokens/s%s", tty_ ? "\r" : "",
                 bar.c_str(), percent, done, total_, si_units(double(bytes)).c_str(),
                 si_units(double(tokens)).c_str(), si_units(double(tokens) / seconds()).c_str(),
                 tty_ && done != total_ ? "" : "\n");
  }
  double seconds() const {
    return std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  size_t total_;
  bool quiet_, tty_;
  int last_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options;
    CLI::App app{"", "preprocess"};
    if (!parse_command_line(describe(app, options), argc, argv)) return 0;
    check_tokenizer_options(options);
    const std::vector<fs::path> files = collect_files(options);
    if (files.empty()) fail("no input files found in ", trident::join(options.inputs, " "));
    if (fs::path(options.output).has_parent_path())
      fs::create_directories(fs::path(options.output).parent_path());
    const auto tokenizer = make_tokenizer(options, files);

    const int64_t vocab_size = tokenizer->vocab_size();
    trident::IndexedDatasetWriter writer(options.output, trident::token_type_for_vocab(vocab_size));
    std::vector<int64_t> counts(size_t(vocab_size), 0);
    Progress progress(files.size(), options.quiet);
    int64_t bytes = 0, tokens = 0;
    size_t documents = 0, skipped = 0;
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string text = trident::read_text_file(files[i].string(), "input");
      if (is_document(text)) {
        std::vector<int64_t> ids = tokenizer->encode(text);
        ids.push_back(tokenizer->end_of_document());
        for (int64_t id : ids) ++counts[size_t(id)];
        writer.add_document(ids.data(), ids.size());
        bytes += int64_t(text.size());
        tokens += int64_t(ids.size());
        ++documents;
      } else {
        ++skipped;
      }
      progress.update(i + 1, bytes, tokens);
    }
    if (documents == 0) {
      // An empty dataset would only fail later, in train; leave no .bin/.idx pair behind.
      trident::remove_tree(options.output + ".bin");
      trident::remove_tree(options.output + ".idx");
      fail("no documents: all ", files.size(), " input files are empty or binary (hold a NUL byte)");
    }
    const double seconds = progress.seconds();
    tokenizer->save(options.output);  // before the index: a finished dataset has its tokenizer
    writer.finish();
    std::printf("wrote %s.bin/.idx: %zu documents, %lld tokens (%zu files skipped: empty or binary)\n"
                "tokenizer: %s, %.2f bytes per token, %s tokens/s (%sB/s); model.vocab_size must be >= %lld\n"
                "unigram entropy: %.4f nats per token\n",
                options.output.c_str(), documents, static_cast<long long>(tokens), skipped,
                tokenizer->describe().c_str(), double(bytes) / double(tokens),
                si_units(double(tokens) / seconds).c_str(), si_units(double(bytes) / seconds).c_str(),
                static_cast<long long>(vocab_size), trident::unigram_entropy_nats(counts));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
