#include "model/block.h"

#include <map>
#include <mutex>

#include "core/error.h"
#include "core/text.h"
#include "model/gpt.h"
#include "model/recompute.h"

namespace trident {
namespace {

// A block's inputs as one list, for recomputation: x, then the documents' ids and positions
// (empty tensors when not given).
std::vector<torch::Tensor> with_documents(const torch::Tensor& x, const Documents& documents) {
  const auto none = torch::empty({0}, x.options().dtype(torch::kLong));
  return {x, documents.ids.defined() ? documents.ids : none,
          documents.positions.defined() ? documents.positions : none};
}

Documents documents_in(const std::vector<torch::Tensor>& inputs) {
  const auto given = [](const torch::Tensor& t) { return t.numel() > 0 ? t : torch::Tensor(); };
  return {given(inputs[1]), given(inputs[2])};
}

const char* const kBuiltIn = "transformer";

struct Registry {
  std::mutex mutex;
  std::map<std::string, BlockFactory> factories;
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: blocks may outlive static destruction
  return *instance;
}

}  // namespace

TransformerBlock::TransformerBlock(const BlockContext& context)
    : streams_(context.streams), recompute_(context.recompute == Recompute::full) {
  compute_ = [this](const std::vector<torch::Tensor>& inputs) { return compute(inputs[0], documents_in(inputs)); };
}

torch::Tensor TransformerBlock::forward(const torch::Tensor& x, const Documents& documents) {
  return recompute_ && is_training() ? recompute(compute_, with_documents(x, documents), *streams_)
                                     : compute(x, documents);
}

torch::Tensor TransformerBlock::forward_cached(const torch::Tensor&, const torch::Tensor&, torch::Tensor&,
                                               torch::Tensor&) {
  fail("this model's blocks (", name(), ") cannot generate with a key/value cache; only model.block=", kBuiltIn, " can");
}

RandomStream& hidden_stream(DropoutStreams& streams, const TensorParallel& tp) {
  return tp.sequence_parallel ? streams.model_parallel : streams.replicated;
}

void register_block(const std::string& name, BlockFactory factory) {
  if (name.empty() || name == kBuiltIn) fail("register_block: the name '", name, "' is taken or empty");
  if (!factory) fail("register_block('", name, "'): the factory is empty");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second)
    fail("register_block: a block named '", name, "' is registered already");
}

std::vector<std::string> registered_blocks() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names = {kBuiltIn};
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

void check_block_registered(const std::string& name) {
  const std::vector<std::string> names = registered_blocks();
  if (std::find(names.begin(), names.end(), name) == names.end())
    fail("model.block='", name, "' is not a block this program knows (", join(names, ", "),
         "); a program registers its own blocks with trident::register_block before building a model of them");
}

std::shared_ptr<TransformerBlock> make_block(const BlockContext& context) {
  const std::string& name = context.config.block;
  if (name == kBuiltIn) return std::make_shared<BlockImpl>(context);
  BlockFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (const auto found = r.factories.find(name); found != r.factories.end()) factory = found->second;
  }
  if (!factory) check_block_registered(name);  // fails, naming the blocks there are
  auto block = factory(context);
  if (!block) fail("model.block='", name, "': its factory returned no block");
  return block;
}

}  // namespace trident
