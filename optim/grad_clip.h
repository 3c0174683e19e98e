// Global-norm gradient clipping (Pascanu et al. 2013), as torch.nn.utils.clip_grad_norm_ does.
#pragma once

#include <torch/types.h>

namespace trident {

// The factor that brings gradients of global norm `norm` down to `max_norm` (1 when they are
// within it, or when max_norm is 0: no clipping). A scalar tensor where `norm` is, computed
// there: no host synchronisation.
torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm);

}  // namespace trident
