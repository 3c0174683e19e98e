// A run's record, written by train beside its metrics file and read by plot --html: what it
// takes to set the run's plan beside its measurements (the resolved config, the ranks, the device
// and the LibTorch it ran on), and what a reader of the report wants to know of the run.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

struct RunRecord {
  std::string config_yaml;  // the resolved config, overrides applied (Config::to_yaml)
  int64_t world_size = 1;
  std::string device;      // as CUDA names it ("NVIDIA H100 80GB HBM3"), or "cpu"
  std::string backend;     // the communicator's: nccl, gloo, mpi
  std::string libtorch;    // LibTorch's version, "1.13.0" (checked: it starts with a number)
  std::string trident;     // trident's version
  int64_t parameters = 0;  // the model's, as built
  std::string started;     // UTC, ISO 8601: when the run (or its last resumption) started
};

// runs/x/metrics.jsonl -> runs/x/metrics.run.json
std::string run_record_path(const std::string& metrics_file);

// JSON; errors name the file, and for a record that cannot be read, the key and what was expected.
void write_run_record(const std::string& path, const RunRecord& record);
RunRecord read_run_record(const std::string& path);

}  // namespace trident
