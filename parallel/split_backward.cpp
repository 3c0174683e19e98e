#include "parallel/split_backward.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/logging.h"

namespace trident {
namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;
using NodeRef = decltype(Edge::function);  // how this LibTorch holds autograd nodes

std::atomic<WeightGrads*> open_split{nullptr};

// The gradients that reached a split node in I.
struct Kept {
  variable_list grads;
};

class KeepGrads : public torch::autograd::FunctionPreHook {
 public:
  explicit KeepGrads(std::shared_ptr<Kept> into) : into_(std::move(into)) {}
  variable_list operator()(const variable_list& grads) override {
    into_->grads = grads;
    return grads;
  }

 private:
  std::shared_ptr<Kept> into_;
};

// What a node leads to.
struct Reach {
  bool input = false, weight = false;
};

// The nodes under `roots` in post order (children first), each with what it leads to; an
// accumulator is an input's when it is in `input_nodes`, else a weight's.
struct Graph {
  std::vector<NodeRef> order;
  std::unordered_map<Node*, Reach> reach;
};

Graph walk(const edge_list& roots, const std::unordered_set<Node*>& input_nodes) {
  Graph graph;
  std::unordered_set<Node*> entered;
  struct Frame {
    NodeRef node;
    size_t next = 0;
  };
  std::vector<Frame> stack;
  for (const Edge& root : roots) {
    if (!root.function || !entered.insert(root.function.get()).second) continue;
    stack.push_back({root.function, 0});
    while (!stack.empty()) {
      Node* node = stack.back().node.get();
      if (stack.back().next < node->num_outputs()) {
        const Edge& edge = node->next_edge(stack.back().next++);
        if (edge.function && entered.insert(edge.function.get()).second) stack.push_back({edge.function, 0});
        continue;
      }
      Reach reach;
      if (input_nodes.count(node)) reach.input = true;
      else if (dynamic_cast<torch::autograd::AccumulateGrad*>(node)) reach.weight = true;
      for (const Edge& edge : node->next_edges())
        if (edge.function) {
          const Reach& child = graph.reach.at(edge.function.get());
          reach.input |= child.input, reach.weight |= child.weight;
        }
      graph.reach[node] = reach;
      graph.order.push_back(std::move(stack.back().node));
      stack.pop_back();
    }
  }
  return graph;
}

// Leads to weights and not to an input: W's part of the graph.
bool weights_only(const Graph& graph, Node* node) {
  const Reach& reach = graph.reach.at(node);
  return reach.weight && !reach.input;
}

// The weights' accumulators under `start` (a node of W's part), each once.
void collect_weights(const Graph& graph, const NodeRef& start, std::unordered_set<Node*>& seen, edge_list& into) {
  std::vector<NodeRef> stack = {start};
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (dynamic_cast<torch::autograd::AccumulateGrad*>(node.get())) {
      into.emplace_back(node, 0);
      continue;
    }
    for (const Edge& edge : node->next_edges())
      if (edge.function && weights_only(graph, edge.function.get())) stack.push_back(edge.function);
  }
}

// One run of W, to `weights`: from an output that leads to weights only, with its gradient, or
// from a split node, with the gradients that reached it in I.
struct WeightPass {
  Edge output;                 // an output's edge
  torch::Tensor output_grad;   // and its gradient
  NodeRef split;               // or a split node
  std::shared_ptr<Kept> kept;  // and what reached it
  edge_list weights;
};

void run_weight_pass(WeightPass& pass) {
  edge_list roots;
  variable_list grads;
  if (!pass.split) {
    roots = {pass.output}, grads = {pass.output_grad};
  } else {
    for (size_t i = 0; i < pass.kept->grads.size(); ++i)
      if (pass.kept->grads[i].defined())
        roots.emplace_back(pass.split, uint32_t(i)), grads.push_back(pass.kept->grads[i]);
    pass.kept->grads.clear();
  }
  if (roots.empty()) return;  // no gradient reached it
  torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false, /*create_graph=*/false,
                                                        /*accumulate_grad=*/true, pass.weights);
}

}  // namespace

void WeightGrads::run() {
  auto steps = std::move(steps_);
  steps_.clear();
  for (auto& step : steps) step();
}

std::vector<torch::Tensor> backward_inputs(const std::vector<torch::Tensor>& outputs,
                                           const std::vector<torch::Tensor>& output_grads,
                                           const std::vector<torch::Tensor>& inputs, WeightGrads& weights) {
  TRIDENT_CHECK(outputs.size() == output_grads.size(), outputs.size(), " outputs and ", output_grads.size(),
                " gradients");
  edge_list roots;
  variable_list root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].requires_grad()) continue;
    roots.push_back(torch::autograd::impl::gradient_edge(outputs[i]));
    root_grads.push_back(output_grads[i].defined() ? output_grads[i] : torch::ones_like(outputs[i]));
  }
  edge_list input_edges;
  std::unordered_set<Node*> input_nodes;
  for (const auto& input : inputs) {
    TRIDENT_CHECK(input.requires_grad() && input.is_leaf(),
                  "a split backward's inputs are leaves that require gradients");
    input_edges.push_back(torch::autograd::impl::gradient_edge(input));
    input_nodes.insert(input_edges.back().function.get());
  }
  if (roots.empty()) return std::vector<torch::Tensor>(inputs.size());

  const Graph graph = walk(roots, input_nodes);
  // W's passes: outputs that lead to weights only, then every split node, in post order.
  std::vector<WeightPass> passes;
  std::unordered_set<Node*> seen;  // weights already in a pass
  bool shared = false;
  auto add_weights = [&](WeightPass& pass, const NodeRef& under) {
    const size_t before = pass.weights.size();
    std::unordered_set<Node*> visited;
    collect_weights(graph, under, visited, pass.weights);
    for (size_t i = before; i < pass.weights.size(); ++i) shared |= !seen.insert(pass.weights[i].function.get()).second;
  };
  for (size_t i = 0; i < roots.size(); ++i)
    if (weights_only(graph, roots[i].function.get())) {
      WeightPass pass{roots[i], root_grads[i], nullptr, nullptr, {}};
      add_weights(pass, roots[i].function);
      passes.push_back(std::move(pass));
    }
  for (const NodeRef& node : graph.order) {
    if (!graph.reach.at(node.get()).input) continue;
    WeightPass pass{Edge(), torch::Tensor(), node, nullptr, {}};
    for (const Edge& edge : node->next_edges())
      if (edge.function && weights_only(graph, edge.function.get())) add_weights(pass, edge.function);
    if (pass.weights.empty()) continue;
    pass.kept = std::make_shared<Kept>();
    passes.push_back(std::move(pass));
  }

  if (shared) {  // a weight under two split nodes: one whole backward now
    static std::once_flag warned;
    std::call_once(warned, [] {
      log::warn("a weight is reached from two places in one pipeline chunk (a weight used twice, or experts without "
                "the grouped multiply): its chunk's backward runs whole in I, and W has nothing to fill the bubble with");
    });
    torch::autograd::backward(outputs, output_grads);
    std::vector<torch::Tensor> grads;
    for (const auto& input : inputs) grads.push_back(input.grad());
    return grads;
  }
  for (auto& pass : passes)
    if (pass.split) pass.split->add_pre_hook(std::make_unique<KeepGrads>(pass.kept));

  std::vector<torch::Tensor> grads(inputs.size());
  if (!input_edges.empty()) {
    variable_list got = torch::autograd::Engine::get_default_engine().execute(
        roots, root_grads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, input_edges);
    for (size_t i = 0; i < got.size(); ++i) grads[i] = got[i];
  }
  if (!passes.empty())
    weights.add([passes = std::make_shared<std::vector<WeightPass>>(std::move(passes)), graph_alive = outputs]() {
      for (auto& pass : *passes) run_weight_pass(pass);
    });
  return grads;
}

SplitRecomputedBlocks::SplitRecomputedBlocks(WeightGrads& weights) {
  WeightGrads* none = nullptr;
  TRIDENT_CHECK(open_split.compare_exchange_strong(none, &weights), "a split backward is open already");
}

SplitRecomputedBlocks::~SplitRecomputedBlocks() { open_split = nullptr; }

WeightGrads* SplitRecomputedBlocks::current() { return open_split; }

}  // namespace trident
