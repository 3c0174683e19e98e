// plan: memory and throughput of every layout of a model on a cluster, and the rule of thumb.
//
//   plan (--config FILE | --size 1.7b) [--gpus N] [--memory-gib M]
//        [--device a100 | h100 | h200 | --profile FILE] [--software trident | megatron-2021 | megatron-core | llama3
//                                                  | torchtitan | llm-foundry]
//        [--gpus-per-node N] [--intra-node-gbs G] [--inter-node-gbs G] [--host-link-gbs G]
//        [--rows 10] [--json FILE] [--explain] [section.key=value ...] [software.setting=value ...]
//   plan --largest --gpus N [--memory-gib M] [--config FILE] [...]
//   plan --validate
//
// The device profile (core/plan/device_profile.h) gives the time model its rates and the node's
// links: a built-in one (--device, A100 by default; also the GPU's own name, as nvidia-smi and
// CUDA print it, which picks its profile as a training run does) or a file (--profile; bench
// --profile measures one); --gpus-per-node and the --*-gbs options override its links. --software picks
// what the training program overlaps and fuses, software.setting=value changes one of its
// settings (core/plan/software.h: fp8, compile, each overlap, ...). --explain prints the
// time and memory of the config's own layout term by term.
// --size takes a row of Megatron's scaling table (1.7b 3.6b 7.5b 18b 39b 76b 145b 310b 530b 1t),
// with its GPU count unless --gpus says otherwise. Prints a table; --json writes every layout.
// --largest prints the largest standard GPT each strategy fits (core/plan/largest_model.h), for the
// config's sequence, vocabulary, precision and batch (default: seq 2048, vocabulary 51200, bf16,
// global batch 512).
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/config.h"
#include "core/error.h"
#include "core/plan/device_profile.h"
#include "core/plan/largest_model.h"
#include "core/plan/planner.h"
#include "core/plan/validation.h"
#include "core/text.h"

using namespace trident;

namespace {

struct Options {
  std::string config_path, size, json_path;
  std::vector<std::string> overrides;
  Hardware hardware;
  int64_t gpus = 0;  // 0: the scaling-table row's own count (with --size)
  int64_t rows = 10;
  bool largest = false, explain = false, validate = false;
  std::string device = "a100", profile_path, software = "trident";
  // Overrides of the profile's links.
  std::optional<int64_t> gpus_per_node;
  std::optional<double> memory_gib, intra_node_gbs, inter_node_gbs, host_link_gbs;
};

std::vector<std::string> row_names() {
  std::vector<std::string> names;
  for (const auto& row : megatron_scaling_table()) names.push_back(row.name);
  return names;
}

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Memory and iteration time of every TP x CP x PP x DP layout of a model on a cluster, "
                  "ranked, with the rule of thumb's choice.");
  auto* config = app.add_option("--config", o.config_path, "YAML config of the model (needs --gpus)");
  auto* size = app.add_option("--size", o.size, "a row of Megatron's scaling table (" +
                                                    join(row_names(), ", ") + "), with its GPU count")
                   ->check(checked(one_of(row_names())));
  config->excludes(size);
  app.add_option("--gpus", o.gpus, "GPUs in the cluster")->check(checked(at_least(1)));
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default: the profile's)")
      ->check(checked(at_least(1)));
  app.add_option("--memory-gib", o.memory_gib, "memory per GPU, GiB (default: the profile's)")
      ->check(checked(positive_number()));
  const Rule<std::string> built_in{
      "a100, h100, h200 or a GPU's name with a built-in profile (an A100, an H100 or H200 SXM)",
      [](const std::string& name) { return known_profile(name) != nullptr; }};
  auto* device = app.add_option("--device", o.device,
                                "built-in device profile: a100, h100, h200, or the GPU's name as nvidia-smi prints it")
                     ->check(checked(built_in))
                     ->capture_default_str();
  app.add_option("--profile", o.profile_path, "device profile file (bench --profile writes one)")->excludes(device);
  app.add_option("--intra-node-gbs", o.intra_node_gbs, "link bandwidth per GPU within a node, GB/s (default: the profile's)")
      ->check(checked(positive_number()));
  app.add_option("--inter-node-gbs", o.inter_node_gbs, "link bandwidth per GPU between nodes, GB/s (default: the profile's)")
      ->check(checked(positive_number()));
  app.add_option("--host-link-gbs", o.host_link_gbs, "GPU to host memory bandwidth, GB/s, for offload (default: the profile's)")
      ->check(checked(positive_number()));
  app.add_option("--software", o.software, "what the training program overlaps and fuses: " + join(software_names(), ", "))
      ->check(checked(one_of(software_names())))->capture_default_str();
  app.add_option("--rows", o.rows, "layouts to print")->check(checked(at_least(1)))->capture_default_str();
  app.add_flag("--largest", o.largest, "the largest standard GPT each strategy fits on --gpus GPUs of --memory-gib")
      ->excludes(size);
  app.add_option("--json", o.json_path, "also write every layout to this file");
  app.add_flag("--explain", o.explain, "the time and memory of the config's own layout, term by term")->excludes("--largest");
  app.add_option("overrides", o.overrides, "section.key=value config overrides, software.setting=value software settings");
  // Each published run is planned with its own device, software and layout.
  auto* validate = app.add_flag("--validate", o.validate,
                                "the time and memory models against published runs (core/plan/published_runs.h), "
                                "each with its own device, software and layout, calibration apart from held-out "
                                "(takes no other option)");
  for (auto* other : app.get_options())
    if (other != validate && other != app.get_help_ptr()) validate->excludes(other);
  return app;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    CLI::App app{"", "plan"};
    if (!parse_command_line(describe(app, o), argc, argv)) return 0;
    Hardware& hardware = o.hardware;
    hardware.device = o.profile_path.empty() ? *known_profile(o.device) : load_device_profile(o.profile_path);
    DeviceProfile& device = hardware.device;
    device.memory_gib = o.memory_gib.value_or(device.memory_gib);
    device.gpus_per_node = o.gpus_per_node.value_or(device.gpus_per_node);
    device.intra_node_gbs = o.intra_node_gbs.value_or(device.intra_node_gbs);
    device.inter_node_gbs = o.inter_node_gbs.value_or(device.inter_node_gbs);
    device.host_link_gbs = o.host_link_gbs.value_or(device.host_link_gbs);
    // software.NAME=VALUE among the overrides set the software; the rest the config.
    const std::string prefix = "software.";
    std::vector<std::string> settings, overrides;
    for (const std::string& item : o.overrides) {
      if (item.rfind(prefix, 0) == 0) settings.push_back(item.substr(prefix.size()));
      else overrides.push_back(item);
    }
    o.overrides = overrides;
    hardware.software = software_with(o.software, settings);
    Config config;
    if (o.validate) {
      std::fputs(validation_table(validate_time_model()).c_str(), stdout);
      return 0;
    }
    if (o.largest) {
      if (o.gpus == 0) fail("--gpus N is needed with --largest");
      hardware.gpus = o.gpus;
      const std::vector<std::string> defaults = {"model.seq_length=2048", "model.vocab_size=51200", "precision=bf16",
                                                 "batch.global_batch_size=512", "data.type=synthetic"};
      std::vector<std::string> overrides = o.config_path.empty() ? defaults : std::vector<std::string>{};
      overrides.insert(overrides.end(), o.overrides.begin(), o.overrides.end());
      config = o.config_path.empty() ? Config::parse("", overrides) : Config::load(o.config_path, overrides);
      if (const std::string setting = config.model.non_standard_gpt_setting(); !setting.empty())
        fail("--largest sizes standard GPT shapes, but the config's ", setting, " is not GPT-2's architecture");
      std::fputs(largest_table(largest_models(config, hardware), hardware, config).c_str(), stdout);
      return 0;
    }
    const ScalingRow* row = nullptr;
    for (const auto& r : megatron_scaling_table())
      if (o.size == r.name) row = &r;
    if (row) {
      config = scaling_row_config(*row);
      for (const auto& item : o.overrides) {
        auto eq = item.find('=');
        if (eq == std::string::npos) fail("override '", item, "': expected section.key=value");
        config.set(item.substr(0, eq), item.substr(eq + 1));
      }
      config.validate();
      hardware.gpus = o.gpus > 0 ? o.gpus : row->gpus;
      std::printf("# Megatron table row %s: TP %lld x PP %lld on %lld GPUs, %g TFLOPS/GPU measured\n",
                  row->name, (long long)row->tensor, (long long)row->pipeline,
                  (long long)row->gpus, row->tflops_per_gpu);
    } else if (!o.config_path.empty()) {
      config = Config::load(o.config_path, o.overrides);
      if (o.gpus == 0) fail("--gpus N is needed with --config");
      hardware.gpus = o.gpus;
    } else {
      fail("give --config FILE or --size ROW (see plan --help)");
    }
    if (o.explain) {
      std::fputs(explain_layout(config, resolve_layout(config, hardware.gpus), hardware).c_str(), stdout);
      return 0;
    }
    const Plan plan = make_plan(config, hardware);
    std::fputs(plan_table(plan, size_t(o.rows)).c_str(), stdout);
    if (row) std::printf("# %s\n", compare_with_row(plan, *row, config).c_str());
    if (!o.json_path.empty()) {
      std::ofstream out(o.json_path);
      out << plan_json(plan);
      if (!out.flush()) fail("cannot write '", o.json_path, "'");
    }
    return plan.recommended ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
