#include "parallel/split_backward.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

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

// One run of W: from outputs that lead to weights only, with their gradients, and from split
// nodes, with the gradients that reached them in I, to `weights`. Split nodes whose weight
// branches meet (experts unbound from one stacked weight when the grouped multiply is not there)
// share a run, so the gradients meet as in a whole backward.
struct WeightPass {
  edge_list outputs;
  variable_list output_grads;
  std::vector<std::pair<NodeRef, std::shared_ptr<Kept>>> splits;
  edge_list weights;
};

void run_weight_pass(WeightPass& pass) {
  edge_list roots = pass.outputs;
  variable_list grads = pass.output_grads;
  for (auto& [split, kept] : pass.splits)
    for (size_t i = 0; i < kept->grads.size(); ++i)
      if (kept->grads[i].defined()) roots.emplace_back(split, uint32_t(i)), grads.push_back(kept->grads[i]);
  if (!roots.empty())  // else no gradient reached them
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false, /*create_graph=*/false,
                                                          /*accumulate_grad=*/true, pass.weights);
  for (auto& split : pass.splits) split.second->grads.clear();  // the hooks kept them again in this run
}

// Where W starts (an output that leads to weights only, or a split node) and the nodes of W's part
// under it; the starts whose nodes meet are joined into one pass.
struct WeightBranch {
  NodeRef split;      // the split node, or null for
  size_t output = 0;  // the output's index
  std::vector<NodeRef> nodes;
};

void add_nodes_under(const Graph& graph, const NodeRef& start, std::unordered_set<Node*>& seen,
                     std::vector<NodeRef>& into) {
  std::vector<NodeRef> stack = {start};
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    for (const Edge& edge : node->next_edges())
      if (edge.function && weights_only(graph, edge.function.get())) stack.push_back(edge.function);
    into.push_back(std::move(node));
  }
}

std::vector<WeightBranch> weight_branches(const Graph& graph, const edge_list& roots) {
  std::vector<WeightBranch> branches;
  for (size_t i = 0; i < roots.size(); ++i)
    if (weights_only(graph, roots[i].function.get())) {
      WeightBranch branch{nullptr, i, {}};
      std::unordered_set<Node*> seen;
      add_nodes_under(graph, roots[i].function, seen, branch.nodes);
      branches.push_back(std::move(branch));
    }
  for (const NodeRef& node : graph.order) {
    if (!graph.reach.at(node.get()).input) continue;
    WeightBranch branch{node, 0, {}};
    std::unordered_set<Node*> seen;
    for (const Edge& edge : node->next_edges())
      if (edge.function && weights_only(graph, edge.function.get()))
        add_nodes_under(graph, edge.function, seen, branch.nodes);
    if (!branch.nodes.empty()) branches.push_back(std::move(branch));
  }
  return branches;
}

// Joins the branches that share a node of W's part (union-find) into passes.
std::vector<WeightPass> weight_passes(const std::vector<WeightBranch>& branches, const edge_list& roots,
                                      const variable_list& root_grads) {
  std::vector<size_t> parent(branches.size());
  for (size_t b = 0; b < branches.size(); ++b) parent[b] = b;
  auto find = [&](size_t b) {
    while (parent[b] != b) b = parent[b] = parent[parent[b]];
    return b;
  };
  std::unordered_map<Node*, size_t> owner;  // a node of W's part -> the first branch under which it lies
  for (size_t b = 0; b < branches.size(); ++b)
    for (const NodeRef& node : branches[b].nodes)
      if (const auto [at, fresh] = owner.emplace(node.get(), b); !fresh) parent[find(b)] = find(at->second);

  std::vector<WeightPass> passes;
  std::unordered_map<size_t, size_t> pass_of;  // a set's root branch -> its pass
  std::unordered_set<Node*> weights_added;  // a weight lies under the branches of one pass alone
  for (size_t b = 0; b < branches.size(); ++b) {
    const auto [at, fresh] = pass_of.emplace(find(b), passes.size());
    if (fresh) passes.emplace_back();
    WeightPass& pass = passes[at->second];
    const WeightBranch& branch = branches[b];
    if (branch.split) {
      pass.splits.emplace_back(branch.split, std::make_shared<Kept>());
    } else {
      pass.outputs.push_back(roots[branch.output]);
      pass.output_grads.push_back(root_grads[branch.output]);
    }
    for (const NodeRef& node : branch.nodes)
      if (dynamic_cast<torch::autograd::AccumulateGrad*>(node.get()) && weights_added.insert(node.get()).second)
        pass.weights.emplace_back(node, 0);
  }
  return passes;
}

// Whether a pass's split nodes lie one below another on the input's path (a weight used at two
// depths of the chunk): W's run from the upper one would compute the input's path down to the
// lower one again. Bits, children first: which such passes have a split node below each node.
bool nested(const Graph& graph, const std::vector<WeightPass>& passes) {
  std::unordered_map<Node*, size_t> bit_of;  // a split node of a pass with several -> the pass's bit
  size_t bits = 0;
  for (const WeightPass& pass : passes)
    if (pass.splits.size() > 1) {
      for (const auto& split : pass.splits) bit_of[split.first.get()] = bits;
      ++bits;
    }
  if (bits == 0) return false;
  const size_t words = (bits + 63) / 64;
  auto has = [](const std::vector<uint64_t>& set, size_t bit) { return (set[bit / 64] >> (bit % 64)) & 1; };
  std::unordered_map<Node*, std::vector<uint64_t>> below;
  for (const NodeRef& node : graph.order) {
    if (!graph.reach.at(node.get()).input) continue;
    std::vector<uint64_t> set(words);
    for (const Edge& edge : node->next_edges()) {
      const auto child = below.find(edge.function.get());
      if (child == below.end()) continue;  // no edge, or not on the input's path
      for (size_t w = 0; w < words; ++w) set[w] |= child->second[w];
      if (const auto bit = bit_of.find(edge.function.get()); bit != bit_of.end())
        set[bit->second / 64] |= uint64_t(1) << (bit->second % 64);
    }
    if (const auto bit = bit_of.find(node.get()); bit != bit_of.end() && has(set, bit->second)) return true;
    below.emplace(node.get(), std::move(set));
  }
  return false;
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
  std::vector<WeightPass> passes = weight_passes(weight_branches(graph, roots), roots, root_grads);
  if (nested(graph, passes)) {  // one whole backward now
    static std::once_flag warned;
    std::call_once(warned, [] {
      log::warn("a weight is used at two depths of one pipeline chunk: its chunk's backward runs whole in I, and W "
                "has nothing to fill the bubble with");
    });
    torch::autograd::backward(outputs, output_grads);
    std::vector<torch::Tensor> grads;
    for (const auto& input : inputs) grads.push_back(input.grad());
    return grads;
  }
  for (auto& pass : passes)
    for (auto& [split, kept] : pass.splits) split->add_pre_hook(std::make_unique<KeepGrads>(kept));

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
