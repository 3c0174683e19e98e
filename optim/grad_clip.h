// Global-norm gradient clipping (Pascanu et al. 2013), as torch.nn.utils.clip_grad_norm_ does.
#pragma once

namespace trident {

// The factor that brings gradients of global norm `norm` down to `max_norm` (1 when they are
// within it, or when max_norm is 0: no clipping).
double clip_coefficient(double norm, double max_norm);

}  // namespace trident
