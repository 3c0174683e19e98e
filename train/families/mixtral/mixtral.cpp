#include "train/families/mixtral/mixtral.h"

#include "core/error.h"
#include "train/families/decoder/decoder.h"

namespace trident {

Family mixtral_family() {
  DecoderFormat format;
  format.model_type = "mixtral";
  format.architecture = "MixtralForCausalLM";
  format.name = "Mixtral";
  format.experts = ExpertNames{"block_sparse_moe", "w1", "w3", "w2"};
  format.unheld_setting = [](const ModelConfig& m) {
    if (m.moe_first_dense_layers > 0) return str("model.moe_first_dense_layers=", m.moe_first_dense_layers);
    if (m.moe_router_pre_softmax) return std::string("model.moe_router_pre_softmax=true");
    return plain_routing_unheld_setting(m);
  };
  format.keys = [](const ModelConfig& m) {
    return std::vector<FamilyKey>{
        {{"intermediate_size"}, "model.moe_ffn_hidden_size (effective)", m.moe_ffn()},
        {{"num_local_experts"}, "model.num_moe_experts", m.num_moe_experts},
        {{"num_experts_per_tok"}, "model.moe_router_topk", m.moe_router_topk},
        {{"router_jitter_noise"}, "trident's router (no jitter)", 0.0, 0.0},
        {{"sliding_window"}, "trident's full attention", nlohmann::json(), nlohmann::json()},
        {{"router_aux_loss_coef"}, "model.moe_aux_loss_coeff", m.moe_aux_loss_coeff, std::nullopt, false}};
  };
  return decoder_family(format);
}

}  // namespace trident
