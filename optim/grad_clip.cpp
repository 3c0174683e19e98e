#include "optim/grad_clip.h"

#include <algorithm>

namespace trident {

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  // The 1e-6 keeps the factor finite at a zero norm, as torch.nn.utils.clip_grad_norm_ does.
  return std::min(1.0, max_norm / (norm + 1e-6));
}

}  // namespace trident
