#include "parallel/flat_layout.h"

#include <algorithm>

#include "core/error.h"

namespace trident {

FlatLayout make_flat_layout(const std::vector<int64_t>& numels, int64_t bucket_elements,
                            int64_t shards, const std::vector<bool>& isolate) {
  if (numels.empty()) fail("a flat buffer needs at least one parameter");
  if (shards < 1) fail("a flat buffer needs at least one shard");
  FlatLayout layout;
  layout.shards = shards;
  layout.numel = numels;
  layout.offset.assign(numels.size(), 0);
  layout.bucket_of.assign(numels.size(), 0);
  auto isolated = [&](size_t i) { return i < isolate.size() && isolate[i]; };
  auto close = [&] {
    auto& bucket = layout.buckets.back();
    bucket.numel = (layout.total - bucket.start + shards - 1) / shards * shards;
    bucket.shard_start = bucket.start / shards;
    layout.total = bucket.start + bucket.numel;
  };
  bool open = false;
  for (size_t k = numels.size(); k-- > 0;) {
    if (open && isolated(k)) close(), open = false;
    if (!open) {
      layout.buckets.emplace_back();
      layout.buckets.back().start = layout.total;
      open = true;
    }
    auto& bucket = layout.buckets.back();
    bucket.params.push_back(k);
    layout.offset[k] = layout.total;
    layout.bucket_of[k] = layout.buckets.size() - 1;
    layout.total += numels[k];
    if (isolated(k) || layout.total - bucket.start >= bucket_elements) close(), open = false;
  }
  if (open) close();
  return layout;
}

std::vector<FlatLayout::Segment> FlatLayout::segments(int64_t rank) const {
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
