#include "core/files.h"

#include <ftw.h>

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

}  // namespace trident
