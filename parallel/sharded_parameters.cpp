#include "parallel/sharded_parameters.h"

#include <torch/autograd.h>

#include "core/error.h"

namespace trident {
namespace {

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

// Gives the memory of `t`'s storage back, or takes it again: the tensor and its views keep
// their shapes and their storage object, whose data pointer changes.
void set_storage_bytes(const torch::Tensor& t, int64_t bytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(size_t(bytes)));
  storage->set_nbytes(size_t(bytes));
}

// An identity in forward; in backward, where it stands in the graph, it gathers a unit again
// (at the unit's output: before the unit's backward) or frees it (at its input: after).
struct UnitBoundary : public torch::autograd::Function<UnitBoundary> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, UnitWeights* weights, int64_t unit,
                               bool gather, std::optional<int64_t> prefetch, const torch::Tensor& x) {
    ctx->saved_data["weights"] = reinterpret_cast<int64_t>(weights);
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["gather"] = gather;
    ctx->saved_data["prefetch"] = prefetch ? c10::IValue(*prefetch) : c10::IValue();
    return x;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* weights = reinterpret_cast<UnitWeights*>(ctx->saved_data["weights"].toInt());
    const int64_t unit = ctx->saved_data["unit"].toInt();
    if (ctx->saved_data["gather"].toBool()) {
      weights->acquire(unit);
      const c10::IValue& prefetch = ctx->saved_data["prefetch"];
      if (!prefetch.isNone()) weights->prefetch(prefetch.toInt());
    } else {
      weights->release(unit);
    }
    return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), grads[0]};
  }
};

}  // namespace

ShardedParameters::ShardedParameters(const std::vector<torch::Tensor>& params, const FlatBuckets& flat,
                                     const std::vector<int64_t>& units, Communicator& dp_group)
    : group_(dp_group), flat_(flat), rank_(dp_group.rank()) {
  TRIDENT_CHECK(params.size() == flat.numel.size() && units.size() == params.size(), params.size(),
                " parameters and ", units.size(), " units for a flat buffer of ", flat.numel.size());
  TRIDENT_CHECK(flat.shards == group_.size(), "weights sharded ", flat.shards, " ways over ", group_.size(), " ranks");
  torch::NoGradGuard no_grad;
  const auto options = params.front().options().requires_grad(false);
  shard_ = torch::empty({flat.shard_numel()}, options);
  buckets_.resize(flat.buckets.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.whole = torch::zeros({flat.buckets[b].numel}, options);
    const int64_t unit = units[flat.buckets[b].params.front()];
    for (size_t p : flat.buckets[b].params) {
      TRIDENT_CHECK(units[p] == unit, "bucket ", b, " holds parameters of units ", unit, " and ", units[p]);
      place_parameter(params[p], bucket.whole.narrow(0, flat.offset[p] - flat.buckets[b].start, flat.numel[p]));
    }
    unit_buckets_[unit].push_back(b);
    slice(b).copy_(bucket.whole.narrow(0, rank_ * flat.slice_numel(b), flat.slice_numel(b)));
    set_storage_bytes(bucket.whole, 0);  // freed until first acquired
  }
}

torch::Tensor ShardedParameters::slice(size_t bucket) const {
  return shard_.narrow(0, flat_.buckets[bucket].shard_start, flat_.slice_numel(bucket));
}

void ShardedParameters::publish() {
  for (auto& bucket : buckets_) free(bucket);
}

int64_t ShardedParameters::bytes() const { return bytes_of(shard_); }

const std::vector<size_t>& ShardedParameters::buckets_of(int64_t unit) const {
  static const std::vector<size_t> none;
  auto it = unit_buckets_.find(unit);
  return it == unit_buckets_.end() ? none : it->second;
}

void ShardedParameters::start_gather(Bucket& bucket, size_t index) {
  set_storage_bytes(bucket.whole, bytes_of(bucket.whole));
  gathered_bytes_ += bytes_of(bucket.whole);
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  bucket.pending = group_.all_gather_async(bucket.whole, slice(index));
  bucket.state = State::gathering;
}

void ShardedParameters::acquire(int64_t unit) {
  for (size_t b : buckets_of(unit)) {
    Bucket& bucket = buckets_[b];
    if (bucket.state == State::freed) start_gather(bucket, b);
    if (bucket.state == State::gathering) {
      bucket.pending->wait();
      bucket.pending.reset();
      bucket.state = State::gathered;
    }
  }
}

void ShardedParameters::acquire_all() {
  for (const auto& [unit, buckets] : unit_buckets_) acquire(unit);
}

void ShardedParameters::prefetch(int64_t unit) {
  for (size_t b : buckets_of(unit))
    if (buckets_[b].state == State::freed) start_gather(buckets_[b], b);
}

void ShardedParameters::release(int64_t unit) {
  for (size_t b : buckets_of(unit)) free(buckets_[b]);
}

void ShardedParameters::free(Bucket& bucket) {
  if (bucket.state == State::freed) return;
  if (bucket.pending) bucket.pending->wait();  // a prefetch nobody used: its buffers are in use until done
  bucket.pending.reset();
  set_storage_bytes(bucket.whole, 0);
  gathered_bytes_ -= bytes_of(bucket.whole);
  bucket.state = State::freed;
}

void ShardedGroups::acquire(int64_t unit) {
  for (auto& group : groups_) group->acquire(unit);
}

void ShardedGroups::prefetch(int64_t unit) {
  for (auto& group : groups_) group->prefetch(unit);
}

void ShardedGroups::release(int64_t unit) {
  for (auto& group : groups_) group->release(unit);
}

void ShardedGroups::acquire_all() {
  for (auto& group : groups_) group->acquire_all();
}

int64_t ShardedGroups::gathered_bytes() const {
  int64_t bytes = 0;
  for (const auto& group : groups_) bytes += group->gathered_bytes();
  return bytes;
}

torch::Tensor gathered_call(UnitWeights& weights, int64_t unit, std::optional<int64_t> next,
                            std::optional<int64_t> previous,
                            const std::function<torch::Tensor(const torch::Tensor&)>& function,
                            const torch::Tensor& input) {
  auto x = UnitBoundary::apply(&weights, unit, /*gather=*/false, std::nullopt, input);
  weights.acquire(unit);
  if (next) weights.prefetch(*next);
  auto y = function(x);
  weights.release(unit);
  return UnitBoundary::apply(&weights, unit, /*gather=*/true, previous, y);
}

}  // namespace trident
