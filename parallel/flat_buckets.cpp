#include "parallel/flat_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace trident {

FlatBuckets make_flat_buckets(const std::vector<int64_t>& numels, int64_t bucket_elements,
                              int64_t shards, const std::vector<int64_t>& groups) {
  TRIDENT_CHECK(!numels.empty(), "a flat buffer needs at least one parameter");
  TRIDENT_CHECK(shards >= 1, "a flat buffer needs at least one shard");
  TRIDENT_CHECK(groups.empty() || groups.size() == numels.size(), groups.size(), " groups for ", numels.size(),
                " parameters");
  FlatBuckets flat;
  flat.shards = shards;
  flat.numel = numels;
  flat.offset.assign(numels.size(), 0);
  flat.bucket_of.assign(numels.size(), 0);
  auto group = [&](size_t i) { return groups.empty() ? 0 : groups[i]; };
  auto close = [&] {
    auto& bucket = flat.buckets.back();
    bucket.numel = (flat.total - bucket.start + shards - 1) / shards * shards;
    bucket.shard_start = bucket.start / shards;
    flat.total = bucket.start + bucket.numel;
  };
  bool open = false;
  for (size_t k = numels.size(); k-- > 0;) {
    if (open && group(flat.buckets.back().params.back()) != group(k)) close(), open = false;
    if (!open) {
      flat.buckets.emplace_back();
      flat.buckets.back().start = flat.total;
      open = true;
    }
    auto& bucket = flat.buckets.back();
    bucket.params.push_back(k);
    flat.offset[k] = flat.total;
    flat.bucket_of[k] = flat.buckets.size() - 1;
    flat.total += numels[k];
    if (flat.total - bucket.start >= bucket_elements) close(), open = false;
  }
  if (open) close();
  return flat;
}

std::vector<FlatBuckets::Segment> FlatBuckets::segments(int64_t rank) const {
  std::vector<Segment> out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t lo = slice_start(b, rank), hi = lo + slice_numel(b);
    for (size_t p : buckets[b].params) {
      const int64_t first = std::max(lo, offset[p]), last = std::min(hi, offset[p] + numel[p]);
      if (first < last) out.push_back({p, first - offset[p], last - first, b, first - lo});
    }
  }
  return out;
}

}  // namespace trident
