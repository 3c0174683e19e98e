// File-system helpers the standard library cannot be trusted with everywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/checksum.h"

namespace trident {

// Removes a file or a whole directory tree; a missing path is not an error. This is
// std::filesystem::remove_all done with POSIX nftw: pip's LibTorch 2.x exports its own copy of
// remove_all, which programs linked against it pick up and which crashes on a non-empty
// directory. Throws Error naming the path that could not be removed.
void remove_tree(const std::string& path);

// Reads a file through, handing each chunk to `consume`. Throws Error "<what> '<path>' cannot
// be read: <cause>" (a directory, a missing file, no permission, an I/O error).
void read_file(const std::string& path, const std::string& what,
               const std::function<void(const char* data, size_t size)>& consume);
// The whole content of a file (read_file's errors).
std::string read_text_file(const std::string& path, const std::string& what);
// Writes `text` as a new file (FileWriter's errors); returns its size and checksum.
FileDigest write_text_file(const std::string& path, const std::string& text);
// The same, replacing `path` atomically: written beside it as <path>.partial, flushed, renamed
// over it. A failure leaves whatever `path` held, and no .partial file.
void replace_file(const std::string& path, const std::string& text);
// Renames a file or folder (atomically, within a file system); throws Error naming both.
void rename_path(const std::string& from, const std::string& to);
// A file's size and checksum (read_file's errors).
FileDigest digest_file(const std::string& path, const std::string& what);

// Writes a new file (created or truncated) through POSIX calls, checksumming what it writes.
// A failed write (ENOSPC, EIO, EROFS, EFBIG) is kept, not thrown, so that writers that cannot
// take an error half-way (LibTorch's archive) can be fed every byte; finish() then reports the
// first cause, once, naming the file.
class FileWriter {
 public:
  // Throws Error "cannot create '<path>': <cause>".
  explicit FileWriter(std::string path);
  ~FileWriter();  // closes without flushing when finish() was not reached
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t size);
  // Flushes the file to disk and closes it; throws Error "writing '<path>' failed: <cause>".
  FileDigest finish();

 private:
  std::string path_;
  int fd_ = -1;
  int error_ = 0;  // the first errno
  Checksum checksum_;
  uint64_t bytes_ = 0;
};

// Flushes a file or directory to disk; throws Error naming it.
void sync_path(const std::string& path);

// A write past the file-size limit (`ulimit -f`) kills the process with SIGXFSZ by default,
// silently and leaving partial files; ignored, the write fails with EFBIG, which the writers
// report like a full disk ("writing '...' failed: File too large") and clean up after. Every
// program calls this first (parse_command_line), and so does the trainer; a program that
// handles the signal itself keeps its handler.
void fail_writes_past_the_file_size_limit();

}  // namespace trident
