#include "train/families/family.h"

#include <mutex>

#include "core/error.h"
#include "core/progress.h"
#include "core/text.h"
#include "train/families/gpt2/gpt2.h"
#include "train/families/llama/llama.h"
#include "train/families/mixtral/mixtral.h"
#include "train/families/qwen3/qwen3.h"
#include "train/families/qwen3_moe/qwen3_moe.h"

namespace trident {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<Family> added;
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: programs may register during static setup
  return *instance;
}

// trident's families, then those added; `r`'s lock held.
std::vector<Family> listed(const Registry& r) {
  std::vector<Family> all = {gpt2_family(), llama_family(), qwen3_family(), mixtral_family(), qwen3_moe_family()};
  all.insert(all.end(), r.added.begin(), r.added.end());
  return all;
}

const char* const kInitFromFamilies = "train.init_from reads Hugging Face models, but their formats";

}  // namespace

void register_family(Family family) {
  if (family.model_type.empty()) fail("register_family: the model_type is empty");
  if (!family.unheld_setting || !family.to_hugging_face || !family.config_json || !family.read)
    fail("register_family('", family.model_type, "'): every function of the family is needed");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);  // the check and the addition as one step
  for (const Family& known : listed(r))
    if (known.model_type == family.model_type)
      fail("register_family: a family with model_type '", family.model_type, "' is known already");
  r.added.push_back(std::move(family));
}

std::vector<Family> families() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return listed(r);
}

Family family_of(const ModelConfig& model, const std::string& purpose) {
  std::vector<std::string> unheld;
  for (const Family& family : families()) {
    const std::string setting = family.unheld_setting(model);
    if (setting.empty()) return family;
    unheld.push_back(str(setting, " is not ", family.model_type, "'s"));
  }
  fail(purpose, " cannot hold this model: ", join(unheld, ", "));
}

NamedTensors to_hugging_face(const NamedTensors& weights, const ModelConfig& model, torch::Dtype dtype) {
  return family_of(model).to_hugging_face(weights, model, dtype);
}

std::string hugging_face_config(const ModelConfig& model, int64_t end_of_document, torch::Dtype dtype) {
  return family_of(model).config_json(model, end_of_document, dtype);
}

void check_init_from(const Config& config) {
  if (!config.train.init_from.empty()) family_of(config.model, kInitFromFamilies);
}

NamedTensors read_hugging_face(const std::string& dir, const ModelConfig& model) {
  Progress progress(str("reading Hugging Face weights from ", dir));
  return family_of(model, kInitFromFamilies).read(dir, model);
}

}  // namespace trident
