// The Llama family (train/families/family.h): Hugging Face's LlamaForCausalLM, a Llama-like
// decoder (train/families/decoder/decoder.h) with grouped queries, biases (attention_bias and
// mlp_bias) and an untied head as options, and no experts or query/key norms.
#pragma once

#include "train/families/family.h"

namespace trident {

Family llama_family();

}  // namespace trident
