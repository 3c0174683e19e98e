// The `train` program: train --config FILE [section.key=value ...] [--dry-run]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/config.h"
#include "core/error.h"
#include "core/layout.h"
#include "core/logging.h"
#include "core/plan/flops.h"
#include "core/plan/planner.h"
#include "core/text.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/launch.h"
#include "train/device.h"
#include "train/run_training.h"

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
  app.set_version_flag("--version", [] { return trident::describe(trident::build_info()); },
                       "print what this build has (LibTorch, CUDA, communicators) and exit");
  app.add_option("overrides", args.overrides,
                 "section.key=value config overrides, applied in order, e.g. train.iters=20");
  return app;
}

// The layout, memory and FLOPs of this config at this world size, and the planner's view of
// the same job, without building anything.
void print_dry_run(const trident::Config& config, const trident::LaunchInfo& launch) {
  using namespace trident;
  const Layout layout = resolve_layout(config, launch.world_size);
  const int64_t vocab = config.model.padded_vocab(layout.tp_size);
  const IterationFlops flops =
      iteration_flops(config.model, vocab, config.batch.global_batch_size, config.recompute);
  Hardware hardware;  // an A100 80 GB cluster, 8 per node (plan --profile for another device)
  hardware.gpus = launch.world_size;
  hardware.software = build_software(torch::kCUDA);  // as this build runs on a GPU
  std::printf("layout: world %lld = %s, %lld micro-batches\n"
              "parameters: %s%s (vocabulary padded to %lld)\n"
              "FLOPs per iteration: %s (model), %s (hardware), %s (6PD)\n",
              (long long)layout.world_size(), describe_axes(layout).c_str(), (long long)layout.micro_batches,
              si_units(double(gpt_parameter_count(config.model, vocab))).c_str(),
              moe_summary(config.model, vocab).c_str(), (long long)vocab,
              si_units(flops.model).c_str(), si_units(flops.hardware).c_str(),
              si_units(flops.six_pd).c_str());
  const PlanRow row = evaluate_layout(config, layout, hardware);
  for (const auto& warning : efficiency_warnings(config, layout, hardware.device))
    std::printf("warning: %s\n", warning.c_str());
  std::printf("%s\n#\n# the planner on the same %lld GPUs:\n%s", describe_row(row).c_str(),
              (long long)launch.world_size, plan_table(make_plan(config, hardware), 5).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trident;
  const std::optional<LaunchInfo> detected = detect_launch_or_report();
  if (!detected) return 2;
  const LaunchInfo& launch = *detected;

  // Arguments, config, layout and backend are checked on every rank, and a mistake is reported
  // after the ranks have connected and agreed on it (run_training): once, by rank 0, whichever
  // ranks found it.
  Arguments args;
  Config config;
  std::exception_ptr input_error;
  CLI::App app{"", "train"};
  try {
    if (!parse_command_line(describe(app, args), argc, argv)) return 0;
    config = Config::load(args.config, args.overrides);
  } catch (const std::exception&) {
    input_error = std::current_exception();
  }
  if (args.dry_run) {  // a report of rank 0's view; nothing connects
    if (!log::primary()) return 0;
    log::set_process(0, 1);
    try {
      if (input_error) std::rethrow_exception(input_error);
      check_training_config(launch, config);  // as run_training checks it
      print_dry_run(config, launch);
      return 0;
    } catch (const std::exception& e) {
      return report_failure(e, 1);
    }
  }
  return run_training(launch, [&] {
    if (input_error) std::rethrow_exception(input_error);
    return config;
  });
}
