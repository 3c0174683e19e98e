// XXH3-64 checksums through xxHash (Debian's libxxhash-dev, used header-only): fast enough to
// checksum every byte of a checkpoint as it is written and again before it is loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace trident {

class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;

  void update(const void* data, size_t size);
  uint64_t value() const;
  // 16 lowercase hex digits.
  static std::string hex(uint64_t value);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A file's size and checksum.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // XXH3-64
};

}  // namespace trident
