#include "parallel/flat_parameters.h"

#include "core/error.h"

namespace trident {

ReplicatedParameters::ReplicatedParameters(const std::vector<torch::Tensor>& params, const FlatBuckets& flat,
                                           Communicator& dp_group)
    : group_(dp_group), flat_(flat), rank_(flat.shards > 1 ? dp_group.rank() : 0) {
  TRIDENT_CHECK(params.size() == flat.numel.size(), params.size(), " parameters for a flat buffer of ",
                flat.numel.size());
  buffer_ = torch::zeros({flat.total}, params.front().options().requires_grad(false));
  for (size_t i = 0; i < params.size(); ++i) place_parameter(params[i], buffer_.narrow(0, flat.offset[i], flat.numel[i]));
}

torch::Tensor ReplicatedParameters::slice(size_t bucket) const {
  return buffer_.narrow(0, flat_.slice_start(bucket, rank_), flat_.slice_numel(bucket));
}

void ReplicatedParameters::publish() {
  if (flat_.shards == 1) return;
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < flat_.buckets.size(); ++b) {
    auto bucket = buffer_.narrow(0, flat_.buckets[b].start, flat_.buckets[b].numel);
    group_.all_gather(bucket, slice(b).clone());
  }
}

int64_t ReplicatedParameters::bytes() const { return buffer_.numel() * int64_t(buffer_.element_size()); }

void place_parameter(const torch::Tensor& param, const torch::Tensor& place) {
  TRIDENT_CHECK(param.numel() == place.numel(), "a parameter of ", param.numel(), " elements for a place of ",
                place.numel());
  torch::NoGradGuard no_grad;
  auto view = place.view_as(param);
  view.copy_(param);
  torch::Tensor(param).set_data(view);
}

}  // namespace trident
