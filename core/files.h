// File-system helpers the standard library cannot be trusted with everywhere.
#pragma once

#include <string>

namespace trident {

// Removes a file or a whole directory tree; a missing path is not an error. This is
// std::filesystem::remove_all done with POSIX nftw: pip's LibTorch 2.x exports its own copy of
// remove_all, which programs linked against it pick up and which crashes on a non-empty
// directory. Throws Error naming the path that could not be removed.
void remove_tree(const std::string& path);

// The whole content of a file. Throws Error "<what> '<path>' cannot be read: <cause>" (a
// directory, a missing file, no permission, an I/O error).
std::string read_text_file(const std::string& path, const std::string& what);

}  // namespace trident
