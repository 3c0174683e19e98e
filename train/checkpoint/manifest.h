// A checkpoint's manifest.json: the iteration, its training loss (null when it was not finite),
// every file's size and XXH3-64 checksum, and every stored tensor piece (TensorPiece: which
// part of which global tensor, in which file). Each rank that writes files records them in a
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

// What a stored tensor is to the model: weights, or a state AdamW keeps per weight.
enum class StateKind { weight, main, exp_avg, exp_avg_sq };
const char* name(StateKind kind);

// One stored piece of a global tensor, in the layout that saved it:
//
//   global "h3.attn.qkv.weight" [3h, h], split along dim 0 into parts = 2 (tensor parallelism):
//     part 0 = rows [0, 3h/2)        part 1 = rows [3h/2, 3h)
//   a piece = elements [offset, offset + numel) of one part, flattened row-major:
//   a whole part for weights, a ZeRO shard's segment of it for optimizer state.
//
// A tensor that is whole on every rank is one part (dim -1, parts 1).
struct TensorPiece {
  std::string name;  // the parameter's global name
  StateKind kind = StateKind::weight;
  int64_t dim = -1;
  int64_t part = 0, parts = 1;
  std::vector<int64_t> part_shape;
  int64_t offset = 0, numel = 0;
  std::string file, key;  // the safetensors file in the checkpoint folder, the tensor's key in it
};

// Writes the files and tensor pieces one rank wrote into `folder` as its part of the manifest.
void write_manifest_part(const std::string& folder, int rank, const std::vector<FileRecord>& files,
                         const std::vector<TensorPiece>& pieces = {});

// Merges every part in `folder` into manifest.json with the iteration and loss (flushed to
// disk), then removes the parts.
void write_manifest(const std::string& folder, int64_t iteration, double loss);

class Manifest {
 public:
  // Reads <folder>/manifest.json. A folder without one gives a manifest that knows no loss and
  // whose verify() refuses every file.
  static Manifest read(const std::string& folder);

  // Whether the checkpoint recorded a finite training loss.
  bool finite_loss() const { return finite_loss_; }
  // Throws Error naming the file unless it is listed, exists, and has the recorded size and
  // checksum (or naming the manifest when there is none).
  void verify(const std::string& file) const;
  const std::vector<TensorPiece>& pieces() const { return pieces_; }

 private:
  std::string folder_;
  bool present_ = false;
  bool finite_loss_ = false;
  std::map<std::string, FileDigest> files_;
  std::vector<TensorPiece> pieces_;
};

}  // namespace trident
