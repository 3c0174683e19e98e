#include "train/families/qwen3_moe/qwen3_moe.h"

#include <numeric>

#include "train/families/decoder/decoder.h"

namespace trident {

Family qwen3_moe_family() {
  DecoderFormat format;
  format.model_type = "qwen3_moe";
  format.architecture = "Qwen3MoeForCausalLM";
  format.name = "Qwen3-MoE";
  format.qk_norm = true;
  format.experts = ExpertNames{"mlp", "gate_proj", "up_proj", "down_proj"};
  format.unheld_setting = plain_routing_unheld_setting;
  format.keys = [](const ModelConfig& m) {
    std::vector<int64_t> dense(size_t(m.moe_first_dense_layers));
    std::iota(dense.begin(), dense.end(), 0);
    return std::vector<FamilyKey>{
        // The dense layers' width, which matters (and is checked) only when there are some.
        {{"intermediate_size"}, "model.ffn_hidden_size (effective)", m.ffn(), std::nullopt, m.moe_first_dense_layers > 0},
        {{"moe_intermediate_size"}, "model.moe_ffn_hidden_size (effective)", m.moe_ffn()},
        {{"num_experts", "num_local_experts"}, "model.num_moe_experts", m.num_moe_experts},
        {{"num_experts_per_tok"}, "model.moe_router_topk", m.moe_router_topk},
        {{"norm_topk_prob"}, "model.moe_router_pre_softmax (negated)", !m.moe_router_pre_softmax, false},
        {{"decoder_sparse_step"}, "model.moe_layer_freq", 1, 1},
        {{"mlp_only_layers"}, "model.moe_first_dense_layers (the layers before it)", dense, nlohmann::json::array()},
        {{"use_sliding_window"}, "trident's full attention", false, false},
        {{"router_aux_loss_coef"}, "model.moe_aux_loss_coeff", m.moe_aux_loss_coeff, std::nullopt, false}};
  };
  return decoder_family(format);
}

}  // namespace trident
