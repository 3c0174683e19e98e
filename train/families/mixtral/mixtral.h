// The Mixtral family (train/families/family.h): Hugging Face's MixtralForCausalLM, a Llama-like
// decoder (train/families/decoder/decoder.h) whose every MLP is a Mixture-of-Experts one
// (block_sparse_moe: a router "gate" and experts of w1 = gate, w3 = up, w2 = down), routed as
// trident's softmax router does: the top k by score, weighted by the softmax over their k scores.
#pragma once

#include "train/families/family.h"

namespace trident {

Family mixtral_family();

}  // namespace trident
