// The `train` program: train --config FILE [section.key=value ...] [--dry-run]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/config.h"
#include "core/error.h"
#include "core/flops.h"
#include "core/plan.h"
#include "core/text.h"
#include "parallel/launch.h"
#include "parallel/layout.h"
#include "train/trainer.h"

namespace {

struct Arguments {
  std::string config;
  std::vector<std::string> overrides;
  bool dry_run = false;
};

CLI::App& describe(CLI::App& app, Arguments& args) {
  app.description("Trains a GPT as the config says: one process, or every rank of a job started by "
                  "mpirun, torchrun-style variables (env://) or SLURM.");
  app.add_option("--config", args.config, "YAML config (see configs/)")->required();
  app.add_flag("--dry-run", args.dry_run,
               "check the config and launch, print the layout and FLOPs, train nothing");
  app.add_option("overrides", args.overrides,
                 "section.key=value config overrides, applied in order, e.g. train.iters=20");
  return app;
}

// The layout, memory and FLOPs of this config at this world size, and the planner's view of
// the same job, without building anything.
void print_dry_run(const trident::Config& config, const trident::LaunchInfo& launch) {
  using namespace trident;
  const Layout layout = resolve_layout(config, launch.world_size);
  const int64_t vocab = config.model.padded_vocab(config.parallel.tensor);
  const IterationFlops flops =
      iteration_flops(config.model, vocab, config.batch.global_batch_size, config.recompute);
  Hardware hardware;  // an A100 80 GB cluster, 8 per node, unless train.peak_tflops says otherwise
  hardware.gpus = launch.world_size;
  if (config.train.peak_tflops > 0) hardware.peak_tflops = config.train.peak_tflops;
  std::printf("layout: world %lld = TP %lld x PP %lld x DP %lld, %lld micro-batches\n"
              "parameters: %s (vocabulary padded to %lld)\n"
              "FLOPs per iteration: %s (model), %s (hardware), %s (6PD)\n",
              (long long)layout.world_size, (long long)layout.tensor, (long long)layout.pipeline,
              (long long)layout.data, (long long)layout.micro_batches,
              si_units(double(gpt_parameter_count(config.model, vocab))).c_str(), (long long)vocab,
              si_units(flops.model).c_str(), si_units(flops.hardware).c_str(),
              si_units(flops.six_pd).c_str());
  const PlanRow row = evaluate_layout(config, layout_of(config, layout.data), hardware);
  std::printf("%s\n#\n# the planner on the same %lld GPUs:\n%s", describe_row(row).c_str(),
              (long long)launch.world_size, plan_table(make_plan(config, hardware), 5).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0;
  // Input is checked identically on every rank, so rank 0 alone reports it; once training
  // runs, a failure may be one rank's own (a lost peer, a full disk) and every rank reports.
  bool training = false;
  try {
    const trident::LaunchInfo launch = trident::detect_launch();
    rank = int(launch.rank);
    Arguments args;
    CLI::App app{"", "train"};
    if (!trident::parse_command_line(describe(app, args), argc, argv)) {
      if (rank == 0) std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    trident::Config config = trident::Config::load(args.config, args.overrides);
    if (args.dry_run) {
      if (rank == 0) print_dry_run(config, launch);
      return 0;
    }
    trident::Trainer trainer(config, launch);
    training = true;
    trainer.train();
    return 0;
  } catch (const trident::Error& e) {
    if (rank == 0 && !training) std::fprintf(stderr, "error: %s\n", e.what());
    if (training) std::fprintf(stderr, "error (rank %d): %s\n", rank, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (rank %d): %s\n", rank, e.what());
    return 1;
  }
}
