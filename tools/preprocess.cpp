// preprocess: text files or JSON lines -> Megatron indexed dataset (.bin/.idx) through a tokenizer.
//
//   preprocess --output PREFIX [--tokenizer byte|sentencepiece|gpt2|hf] [--vocab-size N]
//              [--tokenizer-model FILE] [--vocab vocab.json --merges merges.txt]
//              [--tokenizer-json tokenizer.json] [--json-keys KEY] [--skip-bad-lines]
//              [--workers N] [--extensions .md,.txt] [--quiet] PATH...
//
// A text file is one document; a JSON-lines file holds one per line, the string under
// --json-keys; either may be gzip-compressed. JSON lines are .jsonl files wherever found, and
// .json files named on the command line; a .json found in a folder is text
// (train/data/document_input.h, is_json_lines). Each document
// is stored as its tokens, then the tokenizer's end-of-document id. Directories are walked in
// sorted order; binary documents (holding a NUL byte), empty ones, symbolic links and the
// output's own files (PREFIX.bin, PREFIX.tokenizer.json, ...) are skipped. --workers threads encode, and the dataset is the
// same byte for byte for any number of them (train/data/parallel_encoding.h). The dataset
// records its tokenizer in PREFIX.tokenizer.json with the tokenizer's files beside it
// (train/data/tokenizer.h); tokens are stored as uint8, uint16 or int32, the narrowest that
// holds the vocabulary. The dataset, its index and the tokenizer's files replace older ones
// together once all are written (core/publication.h): a failed or interrupted run leaves the
// older files as they were and no .partial file behind. Prints the unigram entropy that a model
// must beat.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"
#include "core/publication.h"
#include "core/text.h"
#include "train/data/document_input.h"
#include "train/data/indexed_dataset.h"
#include "train/data/parallel_encoding.h"
#include "train/data/tokenizer.h"

namespace fs = std::filesystem;
using trident::checked;
using trident::fail;
using trident::FoundBy;
using trident::InputFile;
using trident::InputRecord;
using trident::parse_command_line;
using trident::RecordDocument;
using trident::si_units;
using trident::str;

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
  std::string json_key = "text";
  bool skip_bad_lines = false;
  int64_t workers = 1;
  std::vector<std::string> extensions;  // empty: every file
  std::vector<std::string> inputs;
  bool quiet = false;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Text files (one document each) or JSON lines (one document per line), plain or .gz -> "
                  "Megatron indexed dataset (PREFIX.bin/.idx) through a tokenizer it records beside the "
                  "dataset; prints the unigram entropy a model must beat.");
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
  app.add_option("--json-keys", o.json_key, "JSON lines: the key whose string is the document")
      ->capture_default_str();
  app.add_flag("--skip-bad-lines", o.skip_bad_lines,
               "JSON lines: skip and count lines that are not an object with a string under the key "
               "(default: stop at the first, naming file and line)");
  app.add_option("--workers", o.workers, "threads that tokenize; the dataset is the same for any number")
      ->check(checked(trident::at_least(1)))
      ->capture_default_str();
  app.add_option("--extensions", o.extensions, "only files with these extensions, e.g. .md,.txt")
      ->delimiter(',');
  app.add_flag("--quiet", o.quiet, "no progress bar");
  app.add_option("inputs", o.inputs,
                 "files and directories (walked in sorted order). JSON lines, one document a line, are .jsonl "
                 "files wherever found and .json files named here (not found in a folder: vocab.json there is "
                 "text); any of them may end .gz; every other file is one text document")
      ->required();
  return app;
}

// Each tokenizer's options, and only those, before any file is read.
void check_options(const Options& o) {
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
  return std::any_of(o.extensions.begin(), o.extensions.end(), [&](const std::string& extension) {
    return path.extension() == extension || (path.extension() == ".gz" && path.stem().extension() == extension);
  });
}

// PREFIX.bin, PREFIX.idx, the tokenizer's files (PREFIX.tokenizer.json, ...), their .partial and
// .previous files and the journal of their publication: the dataset's own files are never its input, whether a second run walks the folder or
// names them. (PREFIX.jsonl is an input: `--output data/web data/web.jsonl` is the usual way.)
// A file a publication stages or keeps while it publishes (core/publication.h).
bool is_staged(const fs::path& file) { return file.extension() == ".partial" || file.extension() == ".previous"; }

bool is_own_output(const fs::path& file, const Options& o) {
  const fs::path prefix = fs::absolute(o.output);
  if (fs::weakly_canonical(fs::absolute(file).parent_path()) != fs::weakly_canonical(prefix.parent_path())) return false;
  const std::string name = (is_staged(file) ? file.stem() : file.filename()).string();
  std::vector<std::string> suffixes = trident::tokenizer_file_suffixes();
  suffixes.insert(suffixes.end(), {".bin", ".idx", ".sentencepiece-corpus", ".publishing"});
  return std::any_of(suffixes.begin(), suffixes.end(), [&](const std::string& suffix) {
    return name == prefix.filename().string() + suffix;
  });
}

// What a run killed before it could clean up left: a half-published dataset is put back
// (core/publication.h), and its .partial and .previous files go.
void remove_leftovers(const Options& o) {
  if (trident::Publication::roll_back_interrupted(o.output + ".publishing"))
    std::fprintf(stderr, "note: put back the files of %s that a run killed while publishing had replaced\n",
                 o.output.c_str());
  const fs::path folder = fs::absolute(o.output).parent_path();
  for (const auto& entry : fs::directory_iterator(folder))
    if (is_staged(entry.path()) && is_own_output(entry.path(), o)) fs::remove(entry.path());
}

std::vector<InputFile> collect_files(const Options& o) {
  std::vector<InputFile> files;
  const auto take = [&](const fs::path& file, FoundBy found_by) {
    if (!is_own_output(file, o)) files.push_back(trident::input_file(file.string(), found_by));
  };
  for (const auto& input : o.inputs) {
    fs::path path(input);
    if (fs::is_symlink(path)) continue;
    if (fs::is_regular_file(path) || fs::is_fifo(path)) {  // a named pipe: a decompressor's output
      take(path, FoundBy::command_line);
    } else if (fs::is_directory(path)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::recursive_directory_iterator(path))
        if (entry.is_regular_file() && !entry.is_symlink() && wanted(entry.path(), o)) found.push_back(entry.path());
      std::sort(found.begin(), found.end());
      for (const auto& file : found) take(file, FoundBy::folder_walk);
    } else {
      fail("input '", input, "' is neither a file nor a directory");
    }
  }
  return files;
}

// Set by SIGINT or SIGTERM; the run stops at the next batch, through the errors' path, so that
// nothing half-written stays behind. A second signal ends the process at once, removing the
// .partial files first (core/publication.h), unless the dataset is being published (a matter
// of renames, after which the run ends anyway); the older dataset is untouched either way.
volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_interrupt(int signal) {
  if (interrupted && !trident::Publication::publishing_now()) {
    trident::Publication::remove_staged_files_in_signal_handler();
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
  interrupted = signal;
}

void stop_if_interrupted() {
  if (interrupted) fail("interrupted by ", strsignal(interrupted), ": no dataset written");
}

// What the documents came to: written, skipped (empty or binary), bad lines skipped.
struct Tally {
  bool skip_bad_lines = false;
  size_t documents = 0, skipped = 0, bad_lines = 0;
  int64_t bytes = 0, tokens = 0;

  // True for a document; an error for a bad line unless they are skipped.
  bool admit(RecordDocument::Kind kind, const std::string& error) {
    if (kind == RecordDocument::empty_or_binary) ++skipped;
    if (kind == RecordDocument::bad_line && !skip_bad_lines) fail(error, " (--skip-bad-lines skips such lines)");
    if (kind == RecordDocument::bad_line) ++bad_lines;
    if (kind == RecordDocument::document) ++documents;
    return kind == RecordDocument::document;
  }
  std::string skipped_text() const {
    return str(skipped, " empty or binary documents", skip_bad_lines ? str(", ", bad_lines, " bad lines") : "",
               " skipped");
  }
};

// SentencePiece trains on lines of files: the documents, one after another, in one file beside
// the output, removed when training ends (staged, never published: a second Ctrl-C removes it too).
std::unique_ptr<trident::Tokenizer> train_sentencepiece_on(const Options& o, const std::vector<InputFile>& files) {
  trident::Publication scratch(o.output + ".sentencepiece-corpus.publishing");
  const std::string corpus = scratch.stage(o.output + ".sentencepiece-corpus");
  Tally tally{o.skip_bad_lines};
  {
    trident::FileWriter out(corpus);
    trident::InputReader reader(files);
    for (std::vector<InputRecord> batch; reader.read(batch, size_t(1) << 20); batch.clear()) {
      for (auto& record : batch) {
        RecordDocument document = trident::document_of(record, o.json_key, reader.files());
        if (!tally.admit(document.kind, document.error)) continue;
        out.write(document.text.data(), document.text.size());
        out.write("\n", 1);
      }
      stop_if_interrupted();
    }
    out.finish();
  }
  if (tally.documents == 0) fail("no documents to train a tokenizer on: ", tally.skipped_text());
  if (!o.quiet) std::fprintf(stderr, "training a SentencePiece BPE tokenizer of %lld ids on %zu documents...\n",
                             static_cast<long long>(o.vocab_size), tally.documents);
  const auto start = std::chrono::steady_clock::now();
  auto tokenizer = trident::train_sentencepiece({corpus}, o.vocab_size);
  std::printf("trained a SentencePiece BPE tokenizer of %lld ids on %zu documents in %.2f s\n",
              static_cast<long long>(o.vocab_size), tally.documents,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  stop_if_interrupted();
  return tokenizer;
}

std::unique_ptr<trident::Tokenizer> make_tokenizer(const Options& o, const std::vector<InputFile>& files) {
  if (o.tokenizer == "gpt2") return trident::load_gpt2_bpe(o.vocab, o.merges);
  if (o.tokenizer == "hf") return trident::load_hf_tokenizer(o.tokenizer_json);
  if (o.tokenizer == "byte") return trident::byte_tokenizer();
  if (!o.tokenizer_model.empty()) return trident::load_sentencepiece(o.tokenizer_model);
  return train_sentencepiece_on(o, files);
}

// A one-line progress bar with throughput, redrawn in place on a terminal, every 10% otherwise.
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), tty_(isatty(2)) {}
  // `fraction`: of the inputs read (reading runs ahead of what is written, so at most 99%).
  void update(double fraction, const Tally& tally) {
    const int percent = std::min(99, int(100 * fraction));
    if (quiet_ || percent == last_ || (!tty_ && percent / 10 == last_ / 10)) return;
    last_ = percent;
    draw(percent, tally, tty_ ? "" : "\n");
  }
  void finish(const Tally& tally) {
    if (!quiet_) draw(100, tally, "\n");
  }
  double seconds() const {
    return std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  void draw(int percent, const Tally& tally, const char* end) const {
    std::string bar(size_t(percent / 4), '#');
    bar.resize(25, ' ');
    std::fprintf(stderr, "%s[%s] %3d%% %s documents, %sB, %sB/s, %s tokens/s%s", tty_ ? "\r" : "", bar.c_str(),
                 percent, si_units(double(tally.documents)).c_str(), si_units(double(tally.bytes)).c_str(),
                 si_units(double(tally.bytes) / seconds()).c_str(), si_units(double(tally.tokens) / seconds()).c_str(),
                 end);
  }

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
    // A killed run's leftovers first, whatever this run's other arguments: its dataset is whole again.
    if (fs::is_directory(fs::absolute(options.output).parent_path())) remove_leftovers(options);
    check_options(options);
    const std::vector<InputFile> files = collect_files(options);
    if (files.empty()) fail("no input files found in ", trident::join(options.inputs, " "));
    if (fs::path(options.output).has_parent_path())
      fs::create_directories(fs::path(options.output).parent_path());
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    const auto tokenizer = make_tokenizer(options, files);

    const int64_t vocab_size = tokenizer->vocab_size();
    // The dataset, its index and the tokenizer's files replace older ones together, or not at all.
    trident::Publication outputs(options.output + ".publishing");
    trident::IndexedDatasetWriter writer(options.output, trident::token_type_for_vocab(vocab_size), &outputs);
    std::vector<int64_t> counts(size_t(vocab_size), 0);
    Tally tally{options.skip_bad_lines};
    trident::EncodingPool pool(*tokenizer, int(options.workers), options.json_key);
    Progress progress(options.quiet);  // from when the tokenizer and its copies are ready
    trident::InputReader reader(files);
    pool.encode_in_order(reader, [&](const trident::EncodedBatch& batch) {
                               const int64_t* tokens = batch.tokens.data();
                               for (const auto& record : batch.records) {
                                 if (!tally.admit(record.kind, record.error)) continue;
                                 for (size_t i = 0; i < record.tokens; ++i) ++counts[size_t(tokens[i])];
                                 writer.add_document(tokens, record.tokens);
                                 tokens += record.tokens;
                                 tally.bytes += int64_t(record.bytes);
                                 tally.tokens += int64_t(record.tokens);
                               }
                               progress.update(reader.fraction_read(), tally);
                               stop_if_interrupted();
                             });
    stop_if_interrupted();
    if (tally.documents == 0)
      fail("no documents in the ", files.size(), " input files: ", tally.skipped_text());
    progress.finish(tally);
    const double seconds = progress.seconds();
    tokenizer->save(options.output, outputs);
    writer.finish();
    stop_if_interrupted();
    outputs.publish();
    std::printf("wrote %s.bin/.idx: %zu documents, %lld tokens (%s)\n"
                "tokenizer: %s, %.2f bytes per token, %s tokens/s (%sB/s) on %lld threads; "
                "model.vocab_size must be >= %lld\n"
                "unigram entropy: %.4f nats per token\n",
                options.output.c_str(), tally.documents, static_cast<long long>(tally.tokens),
                tally.skipped_text().c_str(), tokenizer->describe().c_str(),
                double(tally.bytes) / double(tally.tokens), si_units(double(tally.tokens) / seconds).c_str(),
                si_units(double(tally.bytes) / seconds).c_str(), static_cast<long long>(options.workers),
                static_cast<long long>(vocab_size), trident::unigram_entropy_nats(counts));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return interrupted ? 128 + interrupted : 2;
  }
}
