#include "parallel/sequence_parallel_inputs.h"

#include <torch/csrc/autograd/generated/Functions.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include "core/error.h"
#include "parallel/tensor_parallel.h"

namespace trident {
namespace {

// The shard and its gathered rows while the multiplies sharing them unpack them: gathered at the
// first unpack, dropped once each of the `users` has had them.
class GatheredRows {
 public:
  GatheredRows(torch::Tensor shard, std::shared_ptr<Communicator> tp, size_t users)
      : shard_(std::move(shard)), tp_(std::move(tp)), users_(users) {}
  torch::Tensor unpack() {
    if (!rows_.defined()) {
      torch::NoGradGuard no_grad;
      rows_ = gather_from_sequence_parallel(shard_, *tp_).reshape({-1, shard_.size(-1)});
    }
    torch::Tensor rows = rows_;
    if (++served_ % users_ == 0) rows_.reset();
    return rows;
  }

 private:
  torch::Tensor shard_, rows_;
  std::shared_ptr<Communicator> tp_;
  size_t users_, served_ = 0;
};

struct GatherAgain : public torch::autograd::SavedVariableHooks {
  explicit GatherAgain(std::shared_ptr<GatheredRows> rows) : rows_(std::move(rows)) {}
  void call_pack_hook(const at::Tensor&) override {}  // the gathered rows are not kept
  at::Tensor call_unpack_hook() override { return rows_->unpack(); }
  std::shared_ptr<GatheredRows> rows_;
};

// The saved variable holding a product's first operand (the rows).
torch::autograd::SavedVariable& saved_rows(const torch::Tensor& product) {
  using namespace torch::autograd::generated;
  torch::autograd::Node* node = product.grad_fn().get();
  if (auto* addmm = dynamic_cast<AddmmBackward0*>(node)) return addmm->mat1_;
  if (auto* mm = dynamic_cast<MmBackward0*>(node)) return mm->self_;
  fail("gather_again_in_backward takes products of at::addmm or at::mm, not of ", node->name());
}

}  // namespace

void gather_again_in_backward(const std::vector<torch::Tensor>& products, const torch::Tensor& shard,
                              std::shared_ptr<Communicator> tp) {
  std::vector<torch::Tensor> graphed;
  for (const auto& product : products)
    if (product.grad_fn()) graphed.push_back(product);
  if (graphed.empty()) return;
  const auto rows = std::make_shared<GatheredRows>(shard.detach(), std::move(tp), graphed.size());
  for (const auto& product : graphed) saved_rows(product).register_hooks(std::make_unique<GatherAgain>(rows));
}

}  // namespace trident
