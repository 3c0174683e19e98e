#include "train/data/document_input.h"

#include <zlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trident {
namespace {

constexpr size_t kReadChunk = size_t(1) << 20;

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

gzFile as_gz(void* file) { return static_cast<gzFile>(file); }

std::string zlib_cause(void* file) {
  int code = Z_OK;
  const char* message = gzerror(as_gz(file), &code);
  return code == Z_ERRNO ? std::strerror(errno) : message;
}

}  // namespace

bool is_json_lines(const std::string& path, FoundBy found_by) {
  const std::string name = ends_with(path, ".gz") ? path.substr(0, path.size() - 3) : path;
  return ends_with(name, ".jsonl") || (ends_with(name, ".json") && found_by == FoundBy::command_line);
}

InputFile input_file(const std::string& path, FoundBy found_by) { return {path, is_json_lines(path, found_by)}; }

InputReader::InputReader(const std::vector<InputFile>& files) {
  for (const auto& file : files) {
    files_.push_back(file.path);
    json_lines_files_.push_back(file.json_lines);
    std::error_code error;
    const auto size = fs::file_size(file.path, error);
    sizes_.push_back(error ? 0 : int64_t(size));
    total_ += sizes_.back();
  }
}

InputReader::~InputReader() { close(); }

void InputReader::close() {
  if (open_) gzclose(as_gz(open_));
  open_ = nullptr;
}

bool InputReader::open_next() {
  if (next_ == files_.size()) return false;
  const std::string& path = files_[next_++];
  open_ = gzopen(path.c_str(), "rb");
  if (!open_) fail("input '", path, "' cannot be read: ", errno ? std::strerror(errno) : "out of memory");
  gzbuffer(as_gz(open_), unsigned(kReadChunk));
  json_lines_ = json_lines_files_[next_ - 1];
  line_ = 0;
  pending_.clear();
  at_ = 0;
  return true;
}

size_t InputReader::fill() {
  const size_t before = pending_.size();
  pending_.resize(before + kReadChunk);
  const int got = gzread(as_gz(open_), pending_.data() + before, unsigned(pending_.size() - before));
  const std::string& path = files_[next_ - 1];
  if (got < 0)
    fail("input '", path, "' cannot be read at byte ", gzoffset(as_gz(open_)), " of ", sizes_[next_ - 1], ": ",
         zlib_cause(open_));
  // At the end of the input, zlib says whether a gzip stream was left unfinished: a cut file,
  // whose text would otherwise end silently where the cut fell.
  int code = Z_OK;
  if (got == 0 && (gzerror(as_gz(open_), &code), code == Z_BUF_ERROR))
    fail("input '", path, "' is truncated: its gzip stream ends early, at byte ", sizes_[next_ - 1], " of the file (",
         gztell(as_gz(open_)), " bytes of text), before the end its stream declares");
  pending_.resize(before + size_t(got));
  return size_t(got);
}

bool InputReader::read(std::vector<InputRecord>& batch, size_t bytes) {
  size_t added = 0, read = 0;
  while (added < bytes) {
    if (!open_ && !open_next()) break;
    const size_t file = next_ - 1;
    if (!json_lines_) {  // the whole file is one record
      while (fill() > 0) {
      }
      added += pending_.size();
      batch.push_back({std::move(pending_), file, 0});
      ++read;
      done_ += sizes_[file];
      close();
      continue;
    }
    size_t end = pending_.find('\n', at_);
    if (end == std::string::npos) {  // the line goes on past what is read yet
      pending_.erase(0, at_);
      at_ = 0;
      if (fill() > 0) continue;
      end = pending_.size();  // the last line, without a line end
    }
    ++line_;
    size_t length = end - at_;
    if (length > 0 && pending_[at_ + length - 1] == '\r') --length;
    if (length > 0) {
      batch.push_back({pending_.substr(at_, length), file, line_});
      added += length;
      ++read;
    }
    at_ = std::min(end + 1, pending_.size());
    if (at_ == pending_.size()) {
      pending_.clear();
      at_ = 0;
      if (fill() == 0) {
        done_ += sizes_[file];
        close();
      }
    }
  }
  return read > 0;
}

double InputReader::fraction_read() const {
  if (total_ == 0) return next_ == files_.size() && !open_ ? 1.0 : 0.0;
  const int64_t in_open = open_ ? std::min<int64_t>(gzoffset(as_gz(open_)), sizes_[next_ - 1]) : 0;
  return double(done_ + in_open) / double(total_);
}

RecordDocument document_of(InputRecord& record, const std::string& json_key, const std::vector<std::string>& files) {
  RecordDocument result;
  if (record.line == 0) {
    result.text = std::move(record.bytes);
  } else {
    const auto bad = [&](const std::string& what) {
      result.kind = RecordDocument::bad_line;
      result.error = str("input '", files[record.file], "' line ", record.line, " ", what);
      return result;
    };
    json line;
    try {
      line = json::parse(record.bytes);
    } catch (const json::parse_error& e) {
      // nlohmann-json says so in its message only; JSON text is UTF-8 (RFC 8259).
      if (std::string(e.what()).find("ill-formed UTF-8") != std::string::npos)
        return bad(str("is not UTF-8 (an invalid byte sequence in a string, at byte ", e.byte, "); JSON text must be"));
      return bad(str("is not JSON (a syntax error at byte ", e.byte, ")"));
    }
    if (!line.is_object()) return bad(str("is a JSON ", line.type_name(), ", not an object"));
    const auto value = line.find(json_key);
    if (value == line.end()) return bad(str("has no \"", json_key, "\" (the --json-keys key)"));
    if (!value->is_string()) return bad(str("holds a ", value->type_name(), " under \"", json_key, "\", not a string"));
    result.text = std::move(value->get_ref<std::string&>());
  }
  if (result.text.empty() || result.text.find('\0') != std::string::npos) result.kind = RecordDocument::empty_or_binary;
  return result;
}

}  // namespace trident
