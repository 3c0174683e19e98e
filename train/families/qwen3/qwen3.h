// The Qwen3 family (train/families/family.h): Hugging Face's Qwen3ForCausalLM, a Llama-like
// decoder (train/families/decoder/decoder.h) whose attention normalises each head's queries and
// keys (model.qk_layernorm, RMSNorm) before the rotary embedding, with a head size of its own
// (model.kv_channels: 128 for hidden 2048 and 32 heads in Qwen3-30B-A3B), and no MLP biases.
#pragma once

#include "train/families/family.h"

namespace trident {

Family qwen3_family();

}  // namespace trident
