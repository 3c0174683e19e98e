#include "parallel/sequence_parallel_inputs.h"

#include <torch/csrc/autograd/generated/Functions.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <mutex>

#include "core/error.h"
#include "parallel/tensor_parallel.h"

namespace trident {
namespace {

// The shard and its gathered rows while the multiplies sharing them unpack them: gathered at the
// first unpack, dropped once each of the `users` has had them.
class GatheredRows {
 public:
  GatheredRows(const torch::Tensor& shard, std::shared_ptr<Communicator> tp, size_t users)
      : shard_(shard.detach()), version_(shard._version()), tp_(std::move(tp)), users_(users) {}
  torch::Tensor unpack() {
    const std::lock_guard<std::mutex> lock(mutex_);
    TRIDENT_CHECK(shard_._version() == version_,
                  "a column-parallel layer's input was modified in place after its forward; with sequence "
                  "parallelism its backward gathers that input again, so it must stay as it was");
    if (!rows_.defined()) {
      torch::NoGradGuard no_grad;
      rows_ = gather_from_sequence_parallel(shard_, *tp_).reshape({-1, shard_.size(-1)});
    }
    torch::Tensor rows = rows_;
    if (++served_ % users_ == 0) rows_.reset();
    return rows;
  }
  torch::Tensor placeholder() const { return torch::empty({0}, shard_.options()); }

 private:
  std::mutex mutex_;
  torch::Tensor shard_, rows_;
  int64_t version_;
  std::shared_ptr<Communicator> tp_;
  size_t users_, served_ = 0;
};

// On a product's node: the rows when the node computes its weight's gradient, and nothing to
// gather when it does not (a split backward's I, which needs only the rows' sizes, saved apart).
struct GatherAgain : public torch::autograd::SavedVariableHooks {
  GatherAgain(std::shared_ptr<GatheredRows> rows, torch::autograd::Node* node, size_t weight_edge)
      : rows_(std::move(rows)), node_(node), weight_edge_(weight_edge) {}
  void call_pack_hook(const at::Tensor&) override {}  // the gathered rows are not kept
  at::Tensor call_unpack_hook() override {
    return node_->task_should_compute_output(weight_edge_) ? rows_->unpack() : rows_->placeholder();
  }
  std::shared_ptr<GatheredRows> rows_;
  torch::autograd::Node* node_;  // the node that holds this hook
  size_t weight_edge_;
};

// The saved variable holding a product's first operand (the rows), and the weight's edge.
std::pair<torch::autograd::SavedVariable*, size_t> saved_rows(torch::autograd::Node* node) {
  using namespace torch::autograd::generated;
  if (auto* addmm = dynamic_cast<AddmmBackward0*>(node)) return {&addmm->mat1_, 2};  // bias, rows, weight^T
  if (auto* mm = dynamic_cast<MmBackward0*>(node)) return {&mm->self_, 1};           // rows, weight^T
  fail("gather_again_in_backward takes products of at::addmm or at::mm, not of ", node->name());
}

}  // namespace

void gather_again_in_backward(const std::vector<torch::Tensor>& products, const torch::Tensor& shard,
                              std::shared_ptr<Communicator> tp) {
  std::vector<torch::autograd::Node*> nodes;
  for (const auto& product : products)
    if (product.grad_fn()) nodes.push_back(product.grad_fn().get());
  if (nodes.empty()) return;
  const auto rows = std::make_shared<GatheredRows>(shard, std::move(tp), nodes.size());
  for (auto* node : nodes) {
    const auto [saved, weight_edge] = saved_rows(node);
    saved->register_hooks(std::make_unique<GatherAgain>(rows, node, weight_edge));
  }
}

}  // namespace trident
