// The `train` program: train --config FILE [section.key=value ...] [--dry-run]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/flops.h"
#include "core/text.h"
#include "parallel/launch.h"
#include "parallel/layout.h"
#include "train/trainer.h"

namespace {

constexpr const char* kUsage =
    "usage: train --config FILE [section.key=value ...] [--dry-run]\n"
    "  --config FILE   YAML config (see configs/)\n"
    "  key=value       override one config key, e.g. train.iters=20 model.hidden_size=256\n"
    "  --dry-run       check the config and launch, print the layout and FLOPs, train nothing\n";

struct Arguments {
  std::string config;
  std::vector<std::string> overrides;
  bool dry_run = false;
};

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      args.config = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      args.config = arg.substr(9);
    } else if (arg == "--dry-run") {
      args.dry_run = true;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg.find('=') != std::string::npos && arg.rfind("-", 0) != 0) {
      args.overrides.push_back(arg);
    } else {
      trident::fail("unknown argument '", arg, "'\n", kUsage);
    }
  }
  if (args.config.empty()) trident::fail("missing --config FILE\n", kUsage);
  return args;
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
    const Arguments args = parse_arguments(argc, argv);
    trident::Config config = trident::Config::load(args.config, args.overrides);
    if (args.dry_run) {
      const trident::Layout layout = trident::resolve_layout(config, launch.world_size);
      const int64_t vocab = config.model.padded_vocab(config.parallel.tensor);
      const auto flops = trident::iteration_flops(config.model, vocab,
                                                  config.batch.global_batch_size, config.recompute);
      if (rank == 0)
        std::printf("layout: world %lld = TP %lld x PP %lld x DP %lld, %lld micro-batches\n"
                    "parameters: %s\nFLOPs per iteration: %s (model), %s (hardware), %s (6PD)\n",
                    (long long)layout.world_size, (long long)layout.tensor,
                    (long long)layout.pipeline, (long long)layout.data,
                    (long long)layout.micro_batches,
                    trident::si_units(double(trident::gpt_parameter_count(config.model, vocab))).c_str(),
                    trident::si_units(flops.model).c_str(), trident::si_units(flops.hardware).c_str(),
                    trident::si_units(flops.six_pd).c_str());
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
