// A program built on trident's public API for tests/test_library.cpp: it registers a block that
// is right at every layout ("ffn_only": attention then a squared-ReLU MLP), one that adds an
// auxiliary loss ("ffn_penalized": the same, with 0.01 x the mean square of its output as
// aux/activation_l2), and one that is not right ("rank_scaled": scales its output by 1 + the
// tensor-parallel rank, as a block that mixes up its ranks would), and can throw from a hook or
// add a rank-local term to its loss.
//   library_program [--throw-in-hook | --rank-local-loss | --last-stage-scalars] [section.key=value ...]
#include <trident/trident.h>

#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

class TestBlock : public trident::TransformerBlock {
 public:
  enum class Kind { right, penalized, rank_scaled };
  TestBlock(const trident::BlockContext& context, Kind kind)
      : TransformerBlock(context),
        scale_(kind == Kind::rank_scaled ? 1.0 + context.tp.group->rank() : 1.0),
        auxiliary_(kind == Kind::penalized ? context.auxiliary : nullptr) {
    const trident::ModelConfig& m = context.config;
    norm = register_module("norm", trident::Norm(m.normalization, m.hidden_size, m.layernorm_epsilon, context.tp));
    attn = register_module("attn", trident::SelfAttention(m, context.tp, context.recompute, context.cp, streams_));
    up = register_module("up", trident::ColumnParallelLinear(m.hidden_size, m.ffn(), context.tp));
    down = register_module("down", trident::RowParallelLinear(m.ffn(), m.hidden_size, context.tp, trident::Init::residual));
  }

 protected:
  torch::Tensor compute(const torch::Tensor& x, const trident::Documents& documents) override {
    const torch::Tensor h = x + attn(norm(x), documents);
    const torch::Tensor a = torch::relu(up(h));
    const torch::Tensor out = h + scale_ * down(a * a);
    return auxiliary_ ? auxiliary_->add(out, "activation_l2", out.square().mean(), 0.01) : out;
  }

 private:
  double scale_;
  std::shared_ptr<trident::AuxiliaryLosses> auxiliary_;
  trident::Norm norm{nullptr};
  trident::SelfAttention attn{nullptr};
  trident::ColumnParallelLinear up{nullptr};
  trident::RowParallelLinear down{nullptr};
};

const char* const kConfig = R"(
model: {num_layers: 4, hidden_size: 32, num_attention_heads: 4, seq_length: 16, vocab_size: 256,
        hidden_dropout: 0.0, attention_dropout: 0.0, block: ffn_only}
batch: {micro_batch_size: 2, global_batch_size: 8}
data: {type: synthetic}
optimizer: {lr: 3.0e-3, warmup_iters: 1}
train: {iters: 3, log_interval: 1, eval_interval: 0}
)";

}  // namespace

int main(int argc, char** argv) {
  const std::optional<trident::LaunchInfo> launch = trident::detect_launch_or_report();
  if (!launch) return 2;
  std::vector<std::string> arguments(argv + 1, argv + argc);
  const std::string flag = !arguments.empty() && arguments.front().rfind("--", 0) == 0 ? arguments.front() : "";
  if (!flag.empty()) arguments.erase(arguments.begin());
  using Kind = TestBlock::Kind;
  for (const auto& [name, kind] : std::vector<std::pair<std::string, Kind>>{
           {"ffn_only", Kind::right}, {"ffn_penalized", Kind::penalized}, {"rank_scaled", Kind::rank_scaled}})
    trident::register_block(name, [kind = kind](const trident::BlockContext& context) {
      return std::make_shared<TestBlock>(context, kind);
    });
  trident::declare_auxiliary_loss("activation_l2");
  const auto make_config = [&] { return trident::Config::parse(kConfig, arguments); };
  return trident::run_training(*launch, make_config, [&](trident::Trainer& trainer) {
    trident::Hooks hooks;
    if (flag == "--throw-in-hook")
      hooks.after_step = [](trident::IterationMetrics& m) {
        if (m.iteration == 2) throw std::runtime_error("the program's own check failed");
      };
    if (flag == "--rank-local-loss")
      hooks.loss = [](const trident::TokenLossInput& in) {
        // z-loss on this rank's slice of the vocabulary only: the mistake to catch.
        return trident::vocab_parallel_cross_entropy(in.logits, in.targets, in.tp) + 1e-4 * in.logits.logsumexp(1).square();
      };
    if (flag == "--last-stage-scalars") {
      // The tokens the loss counted in training, a value only the last pipeline stage's ranks
      // know, logged from there; validation's calls (training false) are not counted.
      auto counted = std::make_shared<double>(0);
      hooks.loss = [counted](const trident::TokenLossInput& in) {
        if (in.training)
          *counted += in.loss_mask.defined() ? in.loss_mask.sum().item<double>() : double(in.targets.numel());
        return trident::vocab_parallel_cross_entropy(in.logits, in.targets, in.tp);
      };
      hooks.after_step = [counted](trident::IterationMetrics& m) {
        if (*counted > 0) m.scalars.emplace_back("loss_tokens", *counted);
        *counted = 0;
      };
    }
    trainer.set_hooks(hooks);
  });
}
