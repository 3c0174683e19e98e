#include "core/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

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

std::string read_text_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(what, " '", path, "' cannot be read: ", std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int cause = errno;
      ::close(fd);
      fail(what, " '", path, "' cannot be read: ", std::strerror(cause));
    }
    text.append(buffer, size_t(n));
  }
  ::close(fd);
  return text;
}

}  // namespace trident
