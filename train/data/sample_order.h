// The shuffled order of one epoch's samples: a Fisher-Yates permutation of 0 .. n-1 drawn with a
// counter-based generator keyed by (seed, epoch), so every rank and every run with the same seed
// has the same order. Small orders are a vector; an order of more than `in_memory_limit` samples
// (a 1 T-token dataset at sequence 2048 has 488 M: 3.9 GB as int64) is a file, built once by the
// first process to need it and memory-mapped by every process, so that it costs no memory of its
// own and later starts only map it.
//
// File: <cache prefix>.order-<key>.bin, key = hash of (samples, seed, epoch); a 32-byte header
// ("TRIDORD1", samples, key, 0) then the order as little-endian int64. Built as .partial and
// renamed, under an exclusive lock (flock) on the folder, so processes on one machine, or
// machines sharing the folder, build it once and never read half of one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// Writes the permutation into order[0 .. samples).
void shuffle_order(int64_t* order, int64_t samples, uint64_t seed, int64_t epoch);

class SampleOrder {
 public:
  static constexpr int64_t kInMemoryLimit = int64_t(1) << 22;  // 32 MB as a vector

  // `cache_prefix`: where the file goes, e.g. "data/web" (beside the dataset) or "cache/web".
  // Error naming the file when it cannot be written or read.
  SampleOrder(int64_t samples, uint64_t seed, int64_t epoch, const std::string& cache_prefix,
              int64_t in_memory_limit = kInMemoryLimit);
  ~SampleOrder();
  SampleOrder(const SampleOrder&) = delete;
  SampleOrder& operator=(const SampleOrder&) = delete;

  int64_t operator[](int64_t i) const { return order_[i]; }
  const std::string& file() const { return file_; }  // empty for an order in memory

 private:
  std::vector<int64_t> memory_;
  const int64_t* order_ = nullptr;
  std::string file_;
  void* mapped_ = nullptr;
  size_t mapped_bytes_ = 0;
};

}  // namespace trident
