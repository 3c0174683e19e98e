// preprocess: text files -> Megatron indexed dataset (.bin/.idx) with byte-level tokens.
//
//   preprocess --output PREFIX [--extensions .md,.txt] [--quiet] PATH...
//
// Each file is one document; its bytes are its tokens (vocabulary 256) followed by an
// end-of-document byte 0. Directories are walked in sorted order; binary files (holding a NUL
// byte) and symbolic links are skipped. Prints the unigram entropy that a model must beat.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "train/indexed_dataset.h"

namespace fs = std::filesystem;
using trident::fail;
using trident::parse_command_line;

namespace {

constexpr int64_t kEndOfDocument = 0;

struct Options {
  std::string output;
  std::vector<std::string> extensions;  // empty: every file
  std::vector<std::string> inputs;
  bool quiet = false;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Text files -> Megatron indexed dataset (PREFIX.bin/.idx) of byte-level tokens, one "
                  "document per file; prints the unigram entropy a model must beat.");
  app.add_option("--output", o.output, "dataset prefix: writes PREFIX.bin and PREFIX.idx")->required();
  app.add_option("--extensions", o.extensions, "only files with these extensions, e.g. .md,.txt")
      ->delimiter(',');
  app.add_flag("--quiet", o.quiet, "no progress bar");
  app.add_option("inputs", o.inputs, "files and directories (walked in sorted order)")->required();
  return app;
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

// A one-line progress bar, redrawn in place on a terminal, every 10% otherwise.
class Progress {
 public:
  Progress(size_t total, bool quiet) : total_(total), quiet_(quiet), tty_(isatty(2)) {}
  void update(size_t done, int64_t bytes) {
    if (quiet_ || total_ == 0) return;
    int percent = int(100 * done / total_);
    if (!tty_ && percent / 10 == last_ / 10 && done != total_) return;
    if (percent == last_ && done != total_) return;
    last_ = percent;
    std::string bar(size_t(percent / 4), '#');
    bar.resize(25, ' ');
    std::fprintf(stderr, "%s[%s] %3d%% %zu/%zu files, %sB%s", tty_ ? "\r" : "", bar.c_str(),
                 percent, done, total_, trident::si_units(double(bytes)).c_str(),
                 tty_ && done != total_ ? "" : "\n");
  }

 private:
  size_t total_;
  bool quiet_, tty_;
  int last_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options;
    CLI::App app{"", "preprocess"};
    if (!parse_command_line(describe(app, options), argc, argv)) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    const std::vector<fs::path> files = collect_files(options);
    if (files.empty()) fail("no input files found in ", trident::join(options.inputs, " "));
    if (fs::path(options.output).has_parent_path())
      fs::create_directories(fs::path(options.output).parent_path());

    trident::IndexedDatasetWriter writer(options.output, trident::TokenType::uint8);
    std::vector<int64_t> counts(256, 0);
    Progress progress(files.size(), options.quiet);
    int64_t bytes = 0;
    size_t documents = 0, skipped = 0;
    for (size_t i = 0; i < files.size(); ++i) {
      std::ifstream in(files[i], std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.eof() && in.fail()) fail("cannot read '", files[i].string(), "'");
      if (text.empty() || text.find('\0') != std::string::npos) {
        ++skipped;
      } else {
        std::vector<int64_t> tokens(text.begin(), text.end());
        for (auto& t : tokens) t = int64_t(static_cast<unsigned char>(t));
        tokens.push_back(kEndOfDocument);
        for (int64_t t : tokens) ++counts[size_t(t)];
        writer.add_document(tokens.data(), tokens.size());
        bytes += int64_t(tokens.size());
        ++documents;
      }
      progress.update(i + 1, bytes);
    }
    if (documents == 0) {
      // An empty dataset would only fail later, in train; leave no .bin/.idx pair behind.
      trident::remove_tree(options.output + ".bin");
      trident::remove_tree(options.output + ".idx");
      fail("no documents: all ", files.size(), " input files are empty or binary (hold a NUL byte)");
    }
    writer.finish();
    std::printf("wrote %s.bin/.idx: %zu documents, %lld tokens (%zu files skipped: empty or binary)\n"
                "unigram entropy: %.4f nats per token\n",
                options.output.c_str(), documents, static_cast<long long>(bytes), skipped,
                trident::unigram_entropy_nats(counts));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
