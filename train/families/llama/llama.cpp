#include "train/families/llama/llama.h"

#include "train/families/decoder/decoder.h"

namespace trident {

Family llama_family() {
  DecoderFormat format;
  format.model_type = "llama";
  format.architecture = "LlamaForCausalLM";
  format.name = "Llama";
  format.mlp_bias = true;
  format.unheld_setting = [](const ModelConfig&) { return std::string(); };
  format.keys = [](const ModelConfig& m) {
    return std::vector<FamilyKey>{{{"intermediate_size"}, "model.ffn_hidden_size", m.ffn()},
                                  {{"mlp_bias"}, "model.add_bias_linear", m.add_bias_linear, false}};
  };
  return decoder_family(format);
}

}  // namespace trident
