// The inputs preprocess reads, as records in order:
//  - a text file is one document, its bytes;
//  - a JSON-lines file holds one document per line: a JSON object whose string under a key
//    ("text" by default) is the document (Megatron's preprocess_data.py --json-keys).
// Either may be gzip-compressed (.gz after its extension). Which one a file is follows from its
// name and how it was found (is_json_lines). Reading (decompressing, cutting lines)
// is serial and cheap; taking the document out of a record (parsing its JSON) is document_of(),
// which preprocess runs on its encoding threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// How preprocess came to a file: named on its command line, or found walking a named folder.
enum class FoundBy { command_line, folder_walk };

// The rule for JSON lines (one, so that a folder of sources never stops on a vocab.json):
//  - a name ending .jsonl (or .jsonl.gz) is JSON lines wherever it was found;
//  - a name ending .json (or .json.gz) is JSON lines when named on the command line (Megatron's
//    loose JSON, `--input corpus.json`), and text when found in a folder (vocab.json,
//    package.json, a JSON array: a folder of sources holds such files);
//  - every other file is text.
bool is_json_lines(const std::string& path, FoundBy found_by);

struct InputFile {
  std::string path;
  bool json_lines = false;
};
InputFile input_file(const std::string& path, FoundBy found_by);

struct InputRecord {
  std::string bytes;  // a whole text file, or one line of a JSON-lines file without its line end
  size_t file = 0;    // index into InputReader::files()
  int64_t line = 0;   // 1-based line of a JSON-lines file; 0 for a whole text file
};

class InputReader {
 public:
  // Nothing is opened yet; sizes are taken for progress.
  explicit InputReader(const std::vector<InputFile>& files);
  ~InputReader();
  InputReader(const InputReader&) = delete;
  InputReader& operator=(const InputReader&) = delete;

  // Appends records until they hold at least `bytes` bytes or the inputs end; false when nothing
  // was left to append. Blank lines of JSON-lines files are passed over. Error "input '<file>'
  // cannot be read: <cause>" (zlib's cause for a corrupt .gz).
  bool read(std::vector<InputRecord>& batch, size_t bytes);
  const std::vector<std::string>& files() const { return files_; }
  // The share of the inputs' bytes on disk read so far (compressed bytes for .gz), 0 to 1.
  double fraction_read() const;

 private:
  bool open_next();
  size_t fill();  // appends the next chunk of the open file to pending_; 0 at its end
  void close();

  std::vector<std::string> files_;
  std::vector<bool> json_lines_files_;
  std::vector<int64_t> sizes_;
  int64_t total_ = 0, done_ = 0;  // bytes on disk: of every file, of the files closed
  size_t next_ = 0;               // the next file to open
  void* open_ = nullptr;          // zlib's gzFile (it reads plain files as they are)
  bool json_lines_ = false;
  int64_t line_ = 0;
  std::string pending_;           // read from the open file; handed out up to at_
  size_t at_ = 0;
};

// What a record holds. Documents holding a NUL byte are binary: skipped, like empty ones.
struct RecordDocument {
  enum Kind { document, empty_or_binary, bad_line } kind = document;
  std::string text;   // the document, for kind document
  std::string error;  // for bad_line: "input '<file>' line <n> <what is wrong>"
};
// Moves the document out of `record`. A JSON line is bad when it is not a JSON object or has no
// string under `json_key`.
RecordDocument document_of(InputRecord& record, const std::string& json_key, const std::vector<std::string>& files);

}  // namespace trident
