// trident_sentencepiece: sentencepiece_plugin.h on Debian's libsentencepiece, the only code that
// sees its headers.
#include "train/data/sentencepiece_plugin.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <string>
#include <vector>

#define EXPORTED __attribute__((visibility("default")))

namespace {

// The lines of the files, each with its newline, so that newlines are learned too.
class LinesOfFiles : public sentencepiece::SentenceIterator {
 public:
  explicit LinesOfFiles(std::vector<std::string> files) : files_(std::move(files)) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    for (;;) {
      if (in_.is_open() && std::getline(in_, line_)) {
        line_ += '\n';
        return;
      }
      in_.close();
      if (next_file_ == files_.size()) {
        done_ = true;
        return;
      }
      const std::string& file = files_[next_file_++];
      in_.open(file);
      if (!in_) {
        status_ = {sentencepiece::util::StatusCode::kNotFound, "cannot read '" + file + "'"};
        done_ = true;
        return;
      }
    }
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }

 private:
  std::vector<std::string> files_;
  size_t next_file_ = 0;
  std::ifstream in_;
  std::string line_;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

}  // namespace

struct trident_sp_engine {
  sentencepiece::SentencePieceProcessor processor;
  std::string model, error, text;
  std::vector<int> ids;

  int report(const sentencepiece::util::Status& status) {
    error = status.ok() ? "" : status.ToString();
    return status.ok() ? 0 : 1;
  }
};

extern "C" {

EXPORTED trident_sp_engine* trident_sp_create() { return new trident_sp_engine(); }
EXPORTED void trident_sp_destroy(trident_sp_engine* engine) { delete engine; }

EXPORTED int trident_sp_train(trident_sp_engine* engine, const char* options, const char* const* files,
                              size_t file_count) {
  LinesOfFiles lines({files, files + file_count});
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, &lines, &model);
  if (!lines.status().ok()) return engine->report(lines.status());
  if (!status.ok()) return engine->report(status);
  return trident_sp_load(engine, model.data(), model.size());
}

EXPORTED int trident_sp_load(trident_sp_engine* engine, const char* model, size_t size) {
  engine->model.assign(model, size);
  return engine->report(engine->processor.LoadFromSerializedProto(engine->model));
}

EXPORTED int trident_sp_encode(trident_sp_engine* engine, const char* text, size_t size, const int** ids,
                               size_t* count) {
  engine->ids.clear();
  const int failed = engine->report(engine->processor.Encode(absl::string_view(text, size), &engine->ids));
  *ids = engine->ids.data();
  *count = engine->ids.size();
  return failed;
}

EXPORTED int trident_sp_decode(trident_sp_engine* engine, const int* ids, size_t count, const char** text,
                               size_t* size) {
  engine->text.clear();
  const int failed = engine->report(engine->processor.Decode(std::vector<int>(ids, ids + count), &engine->text));
  *text = engine->text.data();
  *size = engine->text.size();
  return failed;
}

EXPORTED const char* trident_sp_error(const trident_sp_engine* engine) { return engine->error.c_str(); }
EXPORTED const char* trident_sp_model(const trident_sp_engine* engine, size_t* size) {
  *size = engine->model.size();
  return engine->model.data();
}
EXPORTED int trident_sp_piece_size(const trident_sp_engine* engine) { return engine->processor.GetPieceSize(); }
EXPORTED int trident_sp_eos_id(const trident_sp_engine* engine) { return engine->processor.eos_id(); }

}  // extern "C"
