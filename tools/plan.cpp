// plan: memory and throughput of every layout of a model on a cluster, and the rule of thumb.
//
//   plan (--config FILE | --size 1.7b) [--gpus N] [--gpus-per-node 8] [--memory-gib 80]
//        [--peak-tflops 312] [--efficiency 0.5] [--intra-node-gbs 300] [--inter-node-gbs 25]
//        [--rows 10] [--json FILE] [section.key=value ...]
//
// --size takes a row of Megatron's scaling table (1.7b 3.6b 7.5b 18b 39b 76b 145b 310b 530b 1t),
// with its GPU count unless --gpus says otherwise. Prints a table; --json writes every layout.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/plan.h"

using namespace trident;

int main(int argc, char** argv) {
  try {
    std::string config_path, size, json_path;
    std::vector<std::string> overrides;
    Hardware hardware;
    int64_t gpus = 0;
    size_t rows = 10;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) {
        overrides.push_back(arg);
        continue;
      }
      if (i + 1 >= argc) fail("option ", arg, " needs a value");
      const std::string value = argv[++i];
      if (arg == "--config") config_path = value;
      else if (arg == "--size") size = value;
      else if (arg == "--gpus") gpus = std::stoll(value);
      else if (arg == "--gpus-per-node") hardware.gpus_per_node = std::stoll(value);
      else if (arg == "--memory-gib") hardware.memory_gib = std::stod(value);
      else if (arg == "--peak-tflops") hardware.peak_tflops = std::stod(value);
      else if (arg == "--efficiency") hardware.efficiency = std::stod(value);
      else if (arg == "--intra-node-gbs") hardware.intra_node_gbs = std::stod(value);
      else if (arg == "--inter-node-gbs") hardware.inter_node_gbs = std::stod(value);
      else if (arg == "--rows") rows = size_t(std::stoll(value));
      else if (arg == "--json") json_path = value;
      else fail("unknown option ", arg);
    }
    Config config;
    if (!size.empty()) {
      const ScalingRow* found = nullptr;
      for (const auto& row : megatron_scaling_table())
        if (size == row.name) found = &row;
      if (!found) fail("--size ", size, " is not a row of the scaling table (1.7b ... 1t)");
      config = scaling_row_config(*found);
      for (const auto& o : overrides) {
        auto eq = o.find('=');
        if (eq == std::string::npos) fail("override '", o, "': expected section.key=value");
        config.set(o.substr(0, eq), o.substr(eq + 1));
      }
      config.validate();
      hardware.gpus = gpus > 0 ? gpus : found->gpus;
      std::printf("# Megatron table row %s: TP %lld x PP %lld on %lld GPUs, %g TFLOPS/GPU measured\n",
                  found->name, (long long)found->tensor, (long long)found->pipeline,
                  (long long)found->gpus, found->tflops_per_gpu);
    } else if (!config_path.empty()) {
      config = Config::load(config_path, overrides);
      if (gpus <= 0) fail("--gpus N is needed with --config");
      hardware.gpus = gpus;
    } else {
      fail("usage: plan (--config FILE | --size 1.7b) [--gpus N] [options] [key=value ...]");
    }
    const Plan plan = make_plan(config, hardware);
    std::fputs(plan_table(plan, rows).c_str(), stdout);
    for (const auto& row : megatron_scaling_table())
      if (size == row.name) std::printf("# %s\n", compare_with_row(plan, row, config).c_str());
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << plan_json(plan);
      if (!out) fail("cannot write '", json_path, "'");
    }
    return plan.recommended ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
