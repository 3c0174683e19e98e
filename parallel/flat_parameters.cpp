#include "parallel/flat_parameters.h"

#include "core/error.h"

namespace trident {

FlatParameters::FlatParameters(const std::vector<torch::Tensor>& params, const FlatBuckets& flat) {
  TRIDENT_CHECK(params.size() == flat.numel.size(), params.size(), " parameters for a flat buffer of ",
                flat.numel.size());
  torch::NoGradGuard no_grad;
  buffer_ = torch::zeros({flat.total}, params.front().options().requires_grad(false));
  for (size_t i = 0; i < params.size(); ++i) {
    TRIDENT_CHECK(params[i].numel() == flat.numel[i], "parameter ", i, " does not match its place");
    auto view = buffer_.narrow(0, flat.offset[i], flat.numel[i]).view_as(params[i]);
    view.copy_(params[i]);
    torch::Tensor(params[i]).set_data(view);
  }
}

}  // namespace trident
