#include "core/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fault_injection.h"

namespace trident {

void remove_tree(const std::string& path) {
  auto remove_one = [](const char* entry, const struct stat*, int, struct FTW*) {
    return std::remove(entry) == 0 ? 0 : errno;
  };
  // Depth first (children before their directory), without following symbolic links.
  const int failed = nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
  if (failed != 0 && !(failed == -1 && errno == ENOENT))
    fail("cannot remove '", path, "': ", std::strerror(failed > 0 ? failed : errno));
}

void read_file(const std::string& path, const std::string& what,
               const std::function<void(const char* data, size_t size)>& consume) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(what, " '", path, "' cannot be read: ", std::strerror(errno));
  std::vector<char> buffer(size_t(1) << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int cause = errno;
      ::close(fd);
      fail(what, " '", path, "' cannot be read: ", std::strerror(cause));
    }
    consume(buffer.data(), size_t(n));
  }
  ::close(fd);
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::string text;
  read_file(path, what, [&](const char* data, size_t size) { text.append(data, size); });
  return text;
}

FileDigest write_text_file(const std::string& path, const std::string& text) {
  FileWriter writer(path);
  writer.write(text.data(), text.size());
  return writer.finish();
}

void replace_file(const std::string& path, const std::string& text) {
  const std::string partial = path + ".partial";
  try {
    write_text_file(partial, text);
    rename_path(partial, path);
  } catch (...) {
    std::remove(partial.c_str());
    throw;
  }
}

void rename_path(const std::string& from, const std::string& to) {
  const int failed = fault_point() ? EIO : std::rename(from.c_str(), to.c_str()) != 0 ? errno : 0;
  if (failed != 0) fail("cannot rename '", from, "' to '", to, "': ", std::strerror(failed));
}

FileDigest digest_file(const std::string& path, const std::string& what) {
  Checksum checksum;
  FileDigest digest;
  read_file(path, what, [&](const char* data, size_t size) {
    checksum.update(data, size);
    digest.bytes += size;
  });
  digest.checksum = checksum.value();
  return digest;
}

FileWriter::FileWriter(std::string path) : path_(std::move(path)) {
  fd_ = fault_point() ? (errno = EIO, -1) : ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '", path_, "': ", std::strerror(errno));
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::write(const void* data, size_t size) {
  if (bytes_ == 0 && size > 0 && error_ == 0 && fault_point()) error_ = EIO;  // the file's first write
  checksum_.update(data, size);
  bytes_ += size;
  const char* at = static_cast<const char*>(data);
  while (size > 0 && error_ == 0) {
    const ssize_t n = ::write(fd_, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error_ = errno;
      break;
    }
    at += n;
    size -= size_t(n);
  }
}

FileDigest FileWriter::finish() {
  if (error_ == 0 && fault_point()) error_ = EIO;
  if (error_ == 0 && ::fsync(fd_) != 0) error_ = errno;
  if (::close(fd_) != 0 && error_ == 0) error_ = errno;
  fd_ = -1;
  if (error_ != 0) fail("writing '", path_, "' failed: ", std::strerror(error_));
  return {bytes_, checksum_.value()};
}

void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '", path, "' to flush it: ", std::strerror(errno));
  const int failed = fault_point() ? EIO : ::fsync(fd) != 0 ? errno : 0;
  ::close(fd);
  if (failed != 0) fail("flushing '", path, "' to disk failed: ", std::strerror(failed));
}

void fail_writes_past_the_file_size_limit() {
  struct sigaction current {};
  if (sigaction(SIGXFSZ, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGXFSZ, SIG_IGN);
}

}  // namespace trident
