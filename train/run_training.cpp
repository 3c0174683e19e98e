#include "train/run_training.h"

#include <exception>
#include <optional>

#include "core/layout.h"
#include "core/schedule/schedule_file.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "train/families/family.h"
#include "train/stop_signals.h"

namespace trident {

void check_training_config(const LaunchInfo& launch, const Config& config) {
  run_pipeline_schedule(config, resolve_layout(config, launch.world_size));
  check_backend(launch, comm_options(config));
  check_init_from(config);
}

int run_training(const LaunchInfo& launch, const std::function<Config()>& make_config,
                 const std::function<void(Trainer&)>& prepare, const SampleSource* source) {
  // First, so that a stop signal during the start (seconds of loading and connecting) is kept
  // for the first iteration's end rather than ending the rank before it joins the others.
  install_stop_signals();  // SIGTERM, SIGINT: finish the iteration, save, exit (train/stop_signals.h)
  Config config;
  std::exception_ptr input_error;
  try {
    config = make_config();
    check_training_config(launch, config);
  } catch (const std::exception&) {
    input_error = std::current_exception();
  }
  try {
    // With a config that did not load, the default timeout connects the ranks to agree on it.
    const auto timeout = input_error ? CommOptions{}.timeout : comm_options(config).timeout;
    std::shared_ptr<Communicator> world = join_job(launch, timeout, input_error);
    std::optional<Trainer> trainer;
    if (source)
      trainer.emplace(config, *source, launch, world);
    else
      trainer.emplace(config, launch, world);
    if (prepare) prepare(*trainer);
    return trainer->train().exit_code;
  } catch (const std::exception& e) {
    return report_failure(e, int(launch.world_size));
  }
}

}  // namespace trident
