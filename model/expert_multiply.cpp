#include "model/expert_multiply.h"

#include "core/error.h"
#include "model/fused_kernels.h"

#if __has_include(<ATen/ops/_grouped_mm.h>)
#include <ATen/ops/_grouped_mm.h>
#define TRIDENT_GROUPED_MM 1
#endif

namespace trident {
namespace {

torch::Tensor looped(const torch::Tensor& x, const torch::Tensor& weights, const std::vector<int64_t>& counts) {
  // unbind and split, not an index and a narrow per expert: their backwards write each gradient
  // once into one tensor, where a select's would fill a zero tensor of all the experts' size each.
  const std::vector<torch::Tensor> experts = weights.unbind(0), runs = x.split_with_sizes(counts);
  std::vector<torch::Tensor> outputs;
  for (size_t e = 0; e < counts.size(); ++e) outputs.push_back(at::matmul(runs[e], experts[e].t()));
  return torch::cat(outputs);
}

#ifdef TRIDENT_GROUPED_MM
// The grouped kernel wants each group's rows to start at a multiple of 16 (bf16 rows aligned to
// 32 bytes, as torchtitan pads them): the runs are copied into a zero-padded buffer and taken back.
//
//   x        [e0: 5 rows | e1: 20 rows]
//   padded   [e0: 5 rows, 11 zero | e1: 20 rows, 12 zero]   offsets (ends) 16, 48
constexpr int64_t kAlignRows = 16;

torch::Tensor grouped(const torch::Tensor& x, const torch::Tensor& weights, const std::vector<int64_t>& counts) {
  std::vector<int64_t> places;  // each row's place in the padded buffer
  std::vector<int32_t> ends;    // each group's end there
  places.reserve(size_t(x.size(0)));
  int64_t start = 0;
  for (const int64_t n : counts) {
    for (int64_t r = 0; r < n; ++r) places.push_back(start + r);
    start += (n + kAlignRows - 1) / kAlignRows * kAlignRows;
    ends.push_back(int32_t(start));
  }
  const auto place = torch::tensor(places, torch::kLong).to(x.device(), /*non_blocking=*/true);
  const auto offsets = torch::tensor(ends, torch::kInt).to(x.device(), /*non_blocking=*/true);
  const auto padded = torch::zeros({start, x.size(1)}, x.options()).index_copy(0, place, x);
  return at::_grouped_mm(padded, weights.transpose(-2, -1), offsets).index_select(0, place);
}
#endif

}  // namespace

bool grouped_multiply_built() {
#ifdef TRIDENT_GROUPED_MM
  return true;
#else
  return false;
#endif
}

torch::Tensor expert_multiply(const torch::Tensor& x, const torch::Tensor& weights, const std::vector<int64_t>& counts,
                              bool grouped_on) {
  TRIDENT_CHECK(int64_t(counts.size()) == weights.size(0) && x.dim() == 2 && x.size(1) == weights.size(2), "rows ",
                x.sizes(), " in ", counts.size(), " runs for experts ", weights.sizes());
#ifdef TRIDENT_GROUPED_MM
  // The kernel reads rows whose strides are multiples of 16 bytes: widths of 8 bf16 elements. It
  // is Hopper's (compute capability 9): LibTorch 2.8 refuses other GPUs, later versions loop over
  // the groups there, slower than the loop below.
  const bool aligned = x.size(1) % 8 == 0 && weights.size(1) % 8 == 0;
  if (grouped_on && aligned && x.scalar_type() == torch::kBFloat16 && weights.scalar_type() == torch::kBFloat16 &&
      fused::compute_capability(x) == 9)
    return grouped(x, weights, counts);
#else
  (void)grouped_on;
#endif
  return looped(x, weights, counts);
}

}  // namespace trident
