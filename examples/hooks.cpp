// Steering train() from a program: a metric of its own in the log line and the metrics file
// (an exponential moving average of the loss), an early stop all ranks agree on, calls around
// validation and checkpoints, and a loss of its own: cross-entropy plus PaLM's z-loss
// (1e-4 log^2 Z), computed on the vocabulary-parallel logits without gathering them.
//   hooks [section.key=value ...]
//   mpirun -np 4 hooks parallel.tensor=2 parallel.pipeline=2
#include <trident/trident.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

// log Z of each row of logits split over the vocabulary: the maximum and the sum of
// exponentials all-reduced over the tensor-parallel group (the sum through autograd).
torch::Tensor vocab_parallel_log_z(const torch::Tensor& logits, trident::Communicator& tp) {
  torch::Tensor max = std::get<0>(logits.detach().max(-1));
  tp.all_reduce(max, trident::ReduceOp::max);
  const torch::Tensor sum = trident::reduce_from_tensor_parallel((logits - max.unsqueeze(-1)).exp().sum(-1), tp);
  return sum.log() + max;
}

const char* const kConfig = R"(
model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 256,
        hidden_dropout: 0.0, attention_dropout: 0.0}
batch: {micro_batch_size: 2, global_batch_size: 8}
data: {type: synthetic, valid_fraction: 0.1}
optimizer: {lr: 3.0e-3, warmup_iters: 2}
train: {iters: 50, log_interval: 1, eval_interval: 4, eval_iters: 1, save_interval: 4}
)";

}  // namespace

int main(int argc, char** argv) {
  trident::LaunchInfo launch;
  try {
    launch = trident::detect_launch();
    std::vector<std::string> overrides(argv + 1, argv + argc);
    const trident::Config config = trident::Config::parse(kConfig, overrides);
    trident::Trainer trainer(config, launch);
    const bool primary = launch.rank == 0;
    double average = 0;
    const int64_t stop_at = 6;  // an early stop, asked for from a hook, honoured by every rank
    trident::Hooks hooks;
    hooks.after_step = [&](trident::IterationMetrics& m) {
      average = m.iteration == 1 ? m.loss : 0.8 * average + 0.2 * m.loss;  // the same loss on every rank
      m.scalars.emplace_back("loss_average", average);
      if (m.iteration == stop_at) trainer.request_stop();
    };
    hooks.after_validation = [&](const trident::IterationMetrics& m) {
      if (primary) std::printf("hooks: validation at iteration %lld: %.4f\n", (long long)m.iteration, m.valid_loss);
    };
    hooks.before_save = [&](int64_t iteration, const std::string& folder) {
      if (primary) std::printf("hooks: saving iteration %lld into %s\n", (long long)iteration, folder.c_str());
    };
    hooks.after_save = [&](int64_t iteration, const std::string&) {
      if (primary) std::printf("hooks: saved iteration %lld\n", (long long)iteration);
    };
    hooks.loss = [](const trident::TokenLossInput& in) {
      return trident::vocab_parallel_cross_entropy(in.logits, in.targets, in.tp) +
             1e-4 * vocab_parallel_log_z(in.logits, in.tp).pow(2);
    };
    trainer.set_hooks(hooks);
    const trident::TrainingEnd end = trainer.train();
    if (primary) std::printf("hooks: %s after iteration %lld\n", end.completed ? "completed" : ("stopped by " + end.stopped_by).c_str(),
                             (long long)trainer.iteration());
    return end.exit_code;
  } catch (const std::exception& e) {
    return trident::report_failure(e, int(launch.world_size));
  }
}
