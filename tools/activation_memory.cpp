// activation_memory: measures the activation memory of one micro-batch's forward pass on the
// CPU, per rank, under the layout the job is launched with (context parallelism above all),
// and prints it beside core/plan/memory.h's estimate. The measurement is glibc's count of bytes in
// use (mallinfo2) once the forward pass has built its graph, less the count before: what
// autograd keeps for backward, the logits and the loss. One row per job:
//
//   mpirun -np 2 activation_memory --config configs/gpt-tiny.yaml model.seq_length=1024 parallel.context=2
//
// scripts/context_memory_bench runs it at c = 1, 2 and 4 and prints the table.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/config.h"
#include "core/layout.h"
#include "core/logging.h"
#include "core/plan/memory.h"
#include "core/text.h"
#include "model/parallel_model.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/process_groups.h"
#include "parallel/context_parallel.h"
#include "train/device.h"

using namespace trident;

namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description(
      "Activation memory of one micro-batch's forward pass on the CPU, measured (bytes in use after the forward "
      "pass less before) and estimated, under the layout this job is launched with; one row, printed by rank 0.");
  app.add_option("--config", o.config, "YAML config of the model")->required();
  app.add_option("overrides", o.overrides, "section.key=value config overrides");
  return app;
}

double bytes_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return double(info.uordblks + info.hblkhd);
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<LaunchInfo> detected = detect_launch_or_report();
  if (!detected) return 2;
  const LaunchInfo& launch = *detected;
  Options o;
  Config config;
  Layout layout;
  std::exception_ptr input_error;
  try {
    CLI::App app{"", "activation_memory"};
    if (!parse_command_line(describe(app, o), argc, argv)) return 0;
    config = Config::load(o.config, o.overrides);
    layout = resolve_layout(config, launch.world_size);
    if (layout.pp_size != 1) fail("activation_memory measures whole models: set parallel.pipeline=1");
  } catch (const std::exception&) {
    input_error = std::current_exception();
  }
  try {
    const auto world = join_job(launch, comm_options(config).timeout, input_error);
    const ProcessGroups groups(world, layout);
    const int64_t vocab = config.model.padded_vocab(layout.tp_size);
    const torch::Dtype dtype = config.precision == Precision::fp64 ? torch::kDouble : torch::kFloat;
    ParallelModel model = build_parallel_model(config, layout, groups, vocab, dtype, torch::kCPU);
    GPT& gpt = model.chunks.front();
    gpt->train();

    // The same sequences on every rank; each keeps its chunks of them.
    const auto& m = config.model;
    const auto generator = at::detail::createCPUGenerator(config.train.seed);
    const auto tokens = at::randint(m.vocab_size, {layout.micro_batch, m.seq_length + 1}, generator, torch::kLong);
    auto mine = [&](const torch::Tensor& t) {
      return context_parallel_slice(t, 1, groups.coordinates().cp, int(layout.cp_size)).contiguous();
    };
    const auto inputs = mine(tokens.narrow(1, 0, m.seq_length)), targets = mine(tokens.narrow(1, 1, m.seq_length));

    const double before = bytes_in_use();
    torch::Tensor loss = gpt->loss(inputs, targets);
    auto measured = torch::tensor({bytes_in_use() - before}, torch::kDouble);
    world->all_reduce(measured, ReduceOp::max);
    loss.backward();  // the graph was whole: backward runs, its collectives matched on every rank

    const MemoryEstimate estimate = estimate_memory(m, vocab, layout, config.precision, build_software(torch::kCPU));
    if (launch.rank == 0)
      std::printf("| %s | %lld | %lld | %.1f | %.1f |\n", describe_axes(layout).c_str(), (long long)m.seq_length,
                  (long long)(m.seq_length / layout.cp_size), measured.item<double>() / (1 << 20),
                  estimate.activations / (1 << 20));
    return 0;
  } catch (const std::exception& e) {
    return report_failure(e, int(launch.world_size));
  }
}
