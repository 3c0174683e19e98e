// Where every parameter lives in one flat buffer cut into buckets. Buckets follow the reverse
// of the model's parameter order (the order backward produces gradients) and each is padded to
// a multiple of `shards`, so a reduce-scatter hands every data-parallel rank an equal slice of
// it; rank r's shard is the concatenation of its slices of all buckets (ZeRO, as Megatron's
// distributed optimizer lays it out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trident {

struct FlatBuckets {
  struct Bucket {
    int64_t start = 0;        // in the buffer
    int64_t numel = 0;        // padded to a multiple of shards
    int64_t shard_start = 0;  // where this bucket's slice begins in each rank's shard
    std::vector<size_t> params;
  };
  // A parameter's elements inside one rank's slice of one bucket.
  struct Segment {
    size_t param = 0;
    int64_t param_offset = 0;  // first element, counted in the parameter
    int64_t numel = 0;
    size_t bucket = 0;
    int64_t slice_offset = 0;  // counted from the start of the rank's slice of the bucket
  };

  std::vector<Bucket> buckets;
  std::vector<int64_t> offset;     // per parameter (model order), in the buffer
  std::vector<int64_t> numel;      // per parameter
  std::vector<size_t> bucket_of;   // per parameter
  int64_t total = 0;               // buffer elements, padding included
  int64_t shards = 1;

  int64_t slice_numel(size_t bucket) const { return buckets[bucket].numel / shards; }
  int64_t shard_numel() const { return total / shards; }
  // First buffer element of rank r's slice of a bucket.
  int64_t slice_start(size_t bucket, int64_t rank) const {
    return buckets[bucket].start + rank * slice_numel(bucket);
  }
  // The parameters' pieces that rank r's shard holds, bucket by bucket.
  std::vector<Segment> segments(int64_t rank) const;
};

// `numels` in model order. A bucket closes once it holds `bucket_elements`, and holds the
// parameters of one `group` only (per parameter; empty: all in one). Groups keep the tied
// embedding in a bucket of its own (so that its shards line up across ranks that hold it at
// different places, the first and last stage) and make a bucket of each unit ZeRO-3 gathers.
FlatBuckets make_flat_buckets(const std::vector<int64_t>& numels, int64_t bucket_elements,
                              int64_t shards, const std::vector<int64_t>& groups = {});

}  // namespace trident
