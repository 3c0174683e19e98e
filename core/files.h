// File-system helpers the standard library cannot be trusted with everywhere.
#pragma once

#include <string>

namespace trident {

// Removes a file or a whole directory tree; a missing path is not an error. This is
// std::filesystem::remove_all done with POSIX nftw: pip's LibTorch 2.x exports its own copy of
// remove_all, which programs linked against it pick up and which crashes on a non-empty
// directory. Throws Error naming the path that could not be removed.
void remove_tree(const std::string& path);

}  // namespace trident
