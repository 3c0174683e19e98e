// What a parameter is to the parallel layout, declared by the layer that creates it (as
// Megatron tags its parameters where it makes them): how tensor parallelism splits it, what
// finishing its gradient takes, how it starts and whether weight decay applies. The model's
// initialisation, the gradient finishing, the optimizer and the checkpoints read roles; nothing
// recognises a parameter by its name.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/layout.h"

namespace trident {

// How a parameter's initial values are drawn: whole, then this rank's slice (model/init.h).
// `residual` is normal with std / sqrt(2 * layers), for the projections that add into the
// residual stream (GPT-2, Megatron).
enum class Init { normal, residual, zeros, ones };

// The tied embedding of a pipeline: the first stage owns it, the last holds a copy for the head.
enum class Tied { no, owner, copy };

struct ParameterRole {
  int64_t partition_dim = -1;      // the dimension tensor parallelism splits; -1: whole on every TP rank
  // Whole on every TP rank but applied to this rank's share of the work only (its part of the
  // sequence with sequence parallelism, its heads for a per-head norm): its gradient is a
  // partial sum to be all-reduced over TP.
  bool partial_over_tp = false;
  Tied tied = Tied::no;            // gradients of owner and copy are summed over the embedding group
  Init init = Init::normal;
  bool decay = true;               // AdamW's weight decay: matrices and embeddings, not biases or norms
  // Its split dimension is padded to a multiple of the TP size (the vocabulary), so layouts
  // differ in its length: a checkpoint may hold more or fewer of its rows than this layout has.
  bool layout_padded = false;
  // Stacked experts [E / ep, ...] (model/moe.h): expert parallelism splits dimension 0, and the
  // expert-data-parallel ranks hold copies (their gradients reduced, and ZeRO sharding them, over
  // that group rather than over the data- and context-parallel one).
  bool expert = false;

  // Built by name at the layers: ParameterRole::split(0).with_init(Init::residual).
  static ParameterRole split(int64_t dim) {
    ParameterRole role;
    role.partition_dim = dim;
    return role;
  }
  static ParameterRole whole() { return {}; }
  ParameterRole with_init(Init value) const { return with(&ParameterRole::init, value); }
  ParameterRole without_decay() const { return with(&ParameterRole::decay, false); }
  ParameterRole partial_over_tp_when(bool on) const { return with(&ParameterRole::partial_over_tp, on); }
  ParameterRole tied_as(Tied value) const { return with(&ParameterRole::tied, value); }
  ParameterRole padded_for_layout() const { return with(&ParameterRole::layout_padded, true); }
  ParameterRole of_experts() const { return with(&ParameterRole::expert, true); }

  bool replicated() const { return partition_dim < 0; }
  // Whether this rank counts the parameter in the global gradient norm, so that every element
  // is counted once: a TP shard everywhere, a replicated parameter on TP rank 0, the tied
  // embedding on its owner.
  bool counted_in_norm(int tp_rank) const { return (!replicated() || tp_rank == 0) && tied != Tied::copy; }

 private:
  template <typename Field, typename Value>
  ParameterRole with(Field ParameterRole::*field, Value value) const {
    ParameterRole role = *this;
    role.*field = value;
    return role;
  }
};

// A module whose parameters carry their roles. Every parameter-bearing layer of trident is one;
// a parameter registered the plain way has no role, and parameters_with_roles refuses it.
class ParallelModule : public torch::nn::Module {
 public:
  const std::map<std::string, ParameterRole>& own_roles() const { return roles_; }

 protected:
  torch::Tensor register_parameter(const std::string& name, torch::Tensor tensor, ParameterRole role);

 private:
  std::map<std::string, ParameterRole> roles_;
};

struct RoledParameter {
  std::string name;  // as named_parameters() names it
  torch::Tensor tensor;
  ParameterRole role;
};

// A rank's parameters and its tensor-parallel place: together they say which part of each
// global tensor the rank holds (what checkpoints and weight imports read and write). A view:
// the parameters outlive it.
struct PlacedParameters {
  const std::vector<RoledParameter>& params;
  TensorParallelPlace tp;
  ExpertParallelPlace ep = {};
};

// The elements of `params` this rank counts so that, summed over one replica's ranks (the
// model-parallel group), every element of the model counts once (ParameterRole::counted_in_norm):
// its experts count `ep_size` times, as the expert-parallel ranks hold as many others.
int64_t counted_elements(const std::vector<RoledParameter>& params, int tp_rank, int64_t ep_size);

// Every parameter of `module` (in named_parameters() order) with its role. Throws Error naming a
// parameter whose layer declared no role, and how to give it one.
std::vector<RoledParameter> parameters_with_roles(const torch::nn::Module& module);

}  // namespace trident
