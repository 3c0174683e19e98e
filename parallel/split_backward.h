// A backward in two halves (Qi et al. 2024): I, the gradient of a stage's input, which the
// previous stage waits for, and W, the weights' gradients, which can wait to fill the bubble.
//
// LibTorch's backward computes both in one pass. This splits the autograd graph itself, so the
// weights of every layer split alike (linears, norms, embeddings, experts) and no layer needs a
// backward of its own for it:
//
//     output ── ... ── N ── ... ── input       N: a "split node", on the input's path, with
//                      │                       an edge off it that leads to weights only
//                      └── (weights' nodes) ── weight
//
//   I  runs the engine from the outputs to the inputs alone: it skips every edge that leads to
//      weights only (a matmul's weight branch, a norm's weight gradient), and a hook on each
//      split node keeps the gradient that reached it;
//   W  runs the engine from each split node, with that gradient, to its own weights alone: the
//      weight branches run, the input's path is not computed again.
//
// W adds into .grad through each weight's AccumulateGrad (or, gradient-accumulation fusion,
// parallel/linear_multiply.h, into the fp32 buffer from the multiply, AccumulateGrad still running
// after it), so the hooks there (data-parallel reduction, parallel/data_parallel.h) fire as in a
// whole backward. The graph and its saved
// tensors live until W has run. Split nodes whose weight branches meet (experts unbound from one
// stacked weight when the grouped multiply is not there, a weight used by two sibling layers) run
// W together, in one pass from all of them. A weight used at two depths of the chunk (one split
// node below the other on the input's path) cannot split: W's pass from the upper node would run
// the input's path down to the lower one again. Such a backward runs whole in I (with a warning,
// once), W then has nothing left. A stage without inputs (the model's first) does everything in W.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace trident {

// The W half of one or more split backwards, run later.
class WeightGrads {
 public:
  void add(std::function<void()> step) { steps_.push_back(std::move(step)); }
  // Adds the weights' gradients into their .grad; afterwards empty.
  void run();
  bool empty() const { return steps_.empty(); }

 private:
  std::vector<std::function<void()>> steps_;
};

// The I half of the backward from `outputs` (`output_grads`: undefined for a scalar loss, which
// counts 1) to `inputs` (leaves that require gradients): returns the inputs' gradients
// (undefined where none arrives), and leaves the weights' share in `weights`.
std::vector<torch::Tensor> backward_inputs(const std::vector<torch::Tensor>& outputs,
                                           const std::vector<torch::Tensor>& output_grads,
                                           const std::vector<torch::Tensor>& inputs, WeightGrads& weights);

// While one is open, a recomputed block (model/recompute.h), whose backward replays its forward
// inside the outer I, splits its own graph too, its W joining `weights`. One per process: the
// engine may run the block's backward on another thread (a GPU's).
class SplitRecomputedBlocks {
 public:
  explicit SplitRecomputedBlocks(WeightGrads& weights);
  ~SplitRecomputedBlocks();
  SplitRecomputedBlocks(const SplitRecomputedBlocks&) = delete;
  SplitRecomputedBlocks& operator=(const SplitRecomputedBlocks&) = delete;
  // The open one's W, or none.
  static WeightGrads* current();
};

}  // namespace trident
