// SentencePiece BPE (tokenizer.h) through the trident_sentencepiece plugin, which lives in a
// link-map namespace of its own (sentencepiece_plugin.h says why).
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "train/data/sentencepiece_plugin.h"
#include "train/data/tokenizer.h"

namespace fs = std::filesystem;

namespace trident {
namespace {

constexpr const char* kPluginFile = "libtrident_sentencepiece.so";

// Trained so that decode(encode(text)) == text for any text: no normalisation, whitespace kept
// as it is (runs of spaces and indentation included), unknown characters as their bytes; each
// document ends with the end-of-sequence id.
constexpr const char* kTrainingOptions =
    "--model_type=bpe --character_coverage=1.0 --byte_fallback=true --normalization_rule_name=identity "
    "--add_dummy_prefix=false --remove_extra_whitespaces=false --allow_whitespace_only_pieces=true "
    "--split_digits=true --max_sentence_length=16384 --unk_id=0 --bos_id=-1 --eos_id=1 --pad_id=-1 "
    "--minloglevel=1 --num_threads=2";

// The plugin's functions, found by name in its namespace.
struct Plugin {
#define TRIDENT_SP_FUNCTION(name) decltype(&::name) name = nullptr
  TRIDENT_SP_FUNCTION(trident_sp_create);
  TRIDENT_SP_FUNCTION(trident_sp_destroy);
  TRIDENT_SP_FUNCTION(trident_sp_train);
  TRIDENT_SP_FUNCTION(trident_sp_load);
  TRIDENT_SP_FUNCTION(trident_sp_encode);
  TRIDENT_SP_FUNCTION(trident_sp_decode);
  TRIDENT_SP_FUNCTION(trident_sp_error);
  TRIDENT_SP_FUNCTION(trident_sp_model);
  TRIDENT_SP_FUNCTION(trident_sp_piece_size);
  TRIDENT_SP_FUNCTION(trident_sp_eos_id);
#undef TRIDENT_SP_FUNCTION
};

// Where the plugin may be, first match wins: $TRIDENT_PLUGIN_DIR, beside the running program,
// the installed library folder, the build folder.
std::vector<fs::path> plugin_folders() {
  std::vector<fs::path> folders;
  if (const char* dir = std::getenv("TRIDENT_PLUGIN_DIR")) folders.emplace_back(dir);
  std::error_code error;
  const fs::path program = fs::read_symlink("/proc/self/exe", error);
  if (!error) folders.push_back(program.parent_path());
  folders.emplace_back(TRIDENT_PLUGIN_INSTALL_DIR);
  folders.emplace_back(TRIDENT_PLUGIN_BUILD_DIR);
  return folders;
}

Plugin load_plugin() {
  std::string looked;
  for (const auto& folder : plugin_folders()) {
    const fs::path file = folder / kPluginFile;
    looked += (looked.empty() ? "" : ", ") + folder.string();
    if (!fs::exists(file)) continue;
    void* handle = dlmopen(LM_ID_NEWLM, file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) fail("SentencePiece plugin '", file.string(), "' cannot be loaded: ", dlerror());
    Plugin plugin;  // stays loaded for the life of the process
    const auto find = [&](auto& function, const char* name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
      if (!function) fail("SentencePiece plugin '", file.string(), "' has no ", name);
    };
#define TRIDENT_SP_FIND(name) find(plugin.name, #name)
    TRIDENT_SP_FIND(trident_sp_create);
    TRIDENT_SP_FIND(trident_sp_destroy);
    TRIDENT_SP_FIND(trident_sp_train);
    TRIDENT_SP_FIND(trident_sp_load);
    TRIDENT_SP_FIND(trident_sp_encode);
    TRIDENT_SP_FIND(trident_sp_decode);
    TRIDENT_SP_FIND(trident_sp_error);
    TRIDENT_SP_FIND(trident_sp_model);
    TRIDENT_SP_FIND(trident_sp_piece_size);
    TRIDENT_SP_FIND(trident_sp_eos_id);
#undef TRIDENT_SP_FIND
    return plugin;
  }
  fail("SentencePiece tokenizers need ", kPluginFile, ", which is in none of: ", looked,
       " (set TRIDENT_PLUGIN_DIR to the folder that holds it)");
}

// Loaded once per process (a namespace is a scarce resource: glibc has 16).
const Plugin& plugin() {
  static std::once_flag once;
  static Plugin loaded;
  static std::string load_error;
  std::call_once(once, [] {
    try {
      loaded = load_plugin();
    } catch (const std::exception& e) {
      load_error = e.what();
    }
  });
  if (!load_error.empty()) fail(load_error);
  return loaded;
}

// One plugin engine: a SentencePiece processor and its result buffers.
class Engine {
 public:
  Engine() : plugin_(plugin()), engine_(plugin_.trident_sp_create()) {}
  ~Engine() { plugin_.trident_sp_destroy(engine_); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // "" on success, else SentencePiece's message.
  std::string train(const std::string& options, const std::vector<std::string>& files) {
    std::vector<const char*> names;
    for (const auto& file : files) names.push_back(file.c_str());
    return error_unless(plugin_.trident_sp_train(engine_, options.c_str(), names.data(), names.size()) == 0);
  }
  std::string load(const std::string& model) {
    return error_unless(plugin_.trident_sp_load(engine_, model.data(), model.size()) == 0);
  }
  std::string encode(const std::string& text, std::vector<int64_t>& ids) const {
    const int* data = nullptr;
    size_t count = 0;
    const bool ok = plugin_.trident_sp_encode(engine_, text.data(), text.size(), &data, &count) == 0;
    ids.assign(data, data + count);
    return error_unless(ok);
  }
  std::string decode(const std::vector<int64_t>& ids, std::string& text) const {
    const std::vector<int> narrow(ids.begin(), ids.end());
    const char* data = nullptr;
    size_t size = 0;
    const bool ok = plugin_.trident_sp_decode(engine_, narrow.data(), narrow.size(), &data, &size) == 0;
    text.assign(data, size);
    return error_unless(ok);
  }
  std::string model() const {
    size_t size = 0;
    const char* data = plugin_.trident_sp_model(engine_, &size);
    return {data, size};
  }
  int64_t piece_size() const { return plugin_.trident_sp_piece_size(engine_); }
  int64_t eos_id() const { return plugin_.trident_sp_eos_id(engine_); }

 private:
  std::string error_unless(bool ok) const { return ok ? std::string() : plugin_.trident_sp_error(engine_); }
  const Plugin& plugin_;
  trident_sp_engine* engine_;
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  // `engine` holds a model; `source` names it in errors.
  SentencePieceTokenizer(std::unique_ptr<Engine> engine, const std::string& source) : engine_(std::move(engine)) {
    if (engine_->eos_id() < 0) fail("SentencePiece model '", source, "' has no end-of-sequence id");
  }
  std::unique_ptr<Tokenizer> clone() const override {
    auto engine = std::make_unique<Engine>();
    const std::string error = engine->load(engine_->model());
    if (!error.empty()) fail("SentencePiece cannot load its own model again: ", error);
    return std::make_unique<SentencePieceTokenizer>(std::move(engine), "cloned");
  }
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    const std::string error = engine_->encode(text, ids);
    if (!error.empty()) fail("SentencePiece cannot encode: ", error);
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    const std::string error = engine_->decode(ids, text);
    if (!error.empty()) fail("SentencePiece cannot decode: ", error);
    return text;
  }
  int64_t vocab_size() const override { return engine_->piece_size(); }
  int64_t end_of_document() const override { return engine_->eos_id(); }
  std::string type() const override { return "sentencepiece"; }

 protected:
  std::vector<std::string> write_files(const std::string& prefix, Publication& files) const override {
    const std::string file = prefix + ".model";
    write_text_file(files.stage(file), engine_->model());  // it may replace the file it was loaded from
    return {file};
  }

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace

std::unique_ptr<Tokenizer> train_sentencepiece(const std::vector<std::string>& files, int64_t vocab_size) {
  auto engine = std::make_unique<Engine>();
  std::string error;
  {
    log::QuietStderr quiet;  // it echoes its options; a failure is reported below
    error = engine->train(str(kTrainingOptions, " --vocab_size=", vocab_size), files);
  }
  if (!error.empty()) fail("training a SentencePiece tokenizer of ", vocab_size, " ids failed: ", error);
  return std::make_unique<SentencePieceTokenizer>(std::move(engine), "trained");
}

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_file) {
  auto engine = std::make_unique<Engine>();
  const std::string error = engine->load(read_text_file(model_file, "SentencePiece model"));
  if (!error.empty()) fail("SentencePiece model '", model_file, "' cannot be loaded: ", error);
  return std::make_unique<SentencePieceTokenizer>(std::move(engine), model_file);
}

}  // namespace trident
