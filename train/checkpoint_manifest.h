// A checkpoint's manifest.json: the iteration, its training loss (null when it was not finite)
// and every file's size and XXH3-64 checksum. Each rank that writes files records them in a
// part of its own in the staging folder (manifest.rank<r>.json); the commit merges the parts.
// Loading a file checks it against the manifest first, so a truncated or corrupted byte is an
// error naming the file instead of weights that load silently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/checksum.h"

namespace trident {

struct FileRecord {
  std::string name;  // inside the checkpoint folder
  FileDigest digest;
};

// Writes the files one rank wrote into `folder` as its part of the manifest.
void write_manifest_part(const std::string& folder, int rank, const std::vector<FileRecord>& files);

// Merges every part in `folder` into manifest.json with the iteration and loss (flushed to
// disk), then removes the parts.
void write_manifest(const std::string& folder, int64_t iteration, double loss);

class Manifest {
 public:
  // Reads <folder>/manifest.json. A folder without one (written before trident kept checksums)
  // gives a manifest that verifies nothing and knows no loss.
  static Manifest read(const std::string& folder);

  bool present() const { return present_; }
  // Whether the checkpoint recorded a finite training loss.
  bool finite_loss() const { return finite_loss_; }
  // Throws Error naming the file unless it is listed, exists, and has the recorded size and
  // checksum. Does nothing for a manifest that is not present.
  void verify(const std::string& file) const;

 private:
  std::string folder_;
  bool present_ = false;
  bool finite_loss_ = false;
  std::map<std::string, FileDigest> files_;
};

}  // namespace trident
