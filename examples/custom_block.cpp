// A block of one's own: Primer's squared-ReLU MLP (So et al. 2021) in place of GELU, built from
// trident's parallel layers and its attention, registered as model.block=squared_relu. Trains
// on synthetic tokens at whatever layout the launcher and the arguments give:
//   custom_block [section.key=value ...]
//   mpirun -np 4 custom_block parallel.tensor=2 parallel.pipeline=2
// check_custom_block proves it trains the same at every layout as in one process.
#include <trident/trident.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

class SquaredReluBlock : public trident::TransformerBlock {
 public:
  explicit SquaredReluBlock(const trident::BlockContext& context)
      : TransformerBlock(context),
        dropout_(context.config.hidden_dropout),
        stream_(&trident::hidden_stream(*streams_, context.tp)) {
    const trident::ModelConfig& m = context.config;
    const auto norm = [&] { return trident::Norm(m.normalization, m.hidden_size, m.layernorm_epsilon, context.tp); };
    ln_1 = register_module("ln_1", norm());
    attn = register_module("attn", trident::SelfAttention(m, context.tp, context.recompute, context.cp, streams_));
    ln_2 = register_module("ln_2", norm());
    // Column-parallel up (each rank ffn / t rows), row-parallel down, as Megatron pairs them.
    up = register_module("up", trident::ColumnParallelLinear(m.hidden_size, m.ffn(), context.tp));
    down = register_module("down", trident::RowParallelLinear(m.ffn(), m.hidden_size, context.tp, trident::Init::residual));
  }

 protected:
  torch::Tensor compute(const torch::Tensor& x, const trident::Documents& documents) override {
    const torch::Tensor h = x + trident::dropout(attn(ln_1(x), documents), dropout_, is_training(), *stream_);
    const torch::Tensor a = torch::relu(up(ln_2(h)));
    return h + trident::dropout(down(a * a), dropout_, is_training(), *stream_);
  }

 private:
  double dropout_;
  trident::RandomStream* stream_;
  trident::Norm ln_1{nullptr}, ln_2{nullptr};
  trident::SelfAttention attn{nullptr};
  trident::ColumnParallelLinear up{nullptr};
  trident::RowParallelLinear down{nullptr};
};

const char* const kConfig = R"(
model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 256, block: squared_relu,
        hidden_dropout: 0.0, attention_dropout: 0.0}
batch: {micro_batch_size: 2, global_batch_size: 8}
data: {type: synthetic}
optimizer: {lr: 3.0e-3, warmup_iters: 2}
train: {iters: 5, log_interval: 1, eval_interval: 0}
)";

}  // namespace

int main(int argc, char** argv) {
  const std::optional<trident::LaunchInfo> launch = trident::detect_launch_or_report();
  if (!launch) return 2;
  trident::register_block("squared_relu", [](const trident::BlockContext& context) {
    return std::make_shared<SquaredReluBlock>(context);
  });
  // A mistake in the arguments is found on every rank and printed once, by rank 0.
  return trident::run_training(*launch, [&] {
    return trident::Config::parse(kConfig, std::vector<std::string>(argv + 1, argv + argc));
  });
}
