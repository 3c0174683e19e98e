// The Qwen3-MoE family (train/families/family.h): Hugging Face's Qwen3MoeForCausalLM, Qwen3's
// attention (train/families/qwen3/qwen3.h) with Mixture-of-Experts MLPs (mlp: a router "gate" and
// experts of gate_proj, up_proj, down_proj of moe_intermediate_size) in every layer but the
// dense first ones (mlp_only_layers; model.moe_first_dense_layers, of intermediate_size). Its
// norm_topk_prob=true is trident's softmax over the chosen k scores; false, the probabilities
// of the softmax over all experts (model.moe_router_pre_softmax).
#pragma once

#include "train/families/family.h"

namespace trident {

Family qwen3_moe_family();

}  // namespace trident
