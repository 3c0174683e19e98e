#include "train/families/qwen3/qwen3.h"

#include "train/families/decoder/decoder.h"

namespace trident {

Family qwen3_family() {
  DecoderFormat format;
  format.model_type = "qwen3";
  format.architecture = "Qwen3ForCausalLM";
  format.name = "Qwen3";
  format.qk_norm = true;
  format.unheld_setting = [](const ModelConfig&) { return std::string(); };
  format.keys = [](const ModelConfig& m) {
    return std::vector<FamilyKey>{{{"intermediate_size"}, "model.ffn_hidden_size", m.ffn()},
                                  {{"use_sliding_window"}, "trident's full attention", false, false}};
  };
  return decoder_family(format);
}

}  // namespace trident
