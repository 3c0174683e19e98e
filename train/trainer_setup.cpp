// Trainer's construction: the checks, the connections, the model and optimizer, and the resume
// (train/trainer.h); train/trainer.cpp is the loop.
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/plan/flops.h"
#include "core/plan/planner.h"
#include "core/progress.h"
#include "core/schedule/schedule_file.h"
#include "core/text.h"
#include "optim/loss_scaler.h"
#include "optim/parameter_groups.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/process_groups.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/tensors.h"
#include "train/checkpoint_saving.h"
#include "train/device.h"
#include "train/families/family.h"
#include "train/profile.h"
#include "train/stage_forward.h"
#include "train/trainer.h"

namespace trident {
namespace {
// Where each rank keeps its log: train.log_dir, else logs/ beside train.metrics_file, else nowhere.
std::string rank_log_dir(const TrainConfig& t) {
  if (!t.log_dir.empty() || t.metrics_file.empty()) return t.log_dir;
  return (std::filesystem::path(t.metrics_file).parent_path() / "logs").string();
}
}  // namespace

Trainer::Trainer(Config config, const LaunchInfo& launch, std::shared_ptr<Communicator> cpu_world)
    : Trainer(std::move(config), nullptr, launch, std::move(cpu_world)) {}

Trainer::Trainer(Config config, const SampleSource& source, const LaunchInfo& launch,
                 std::shared_ptr<Communicator> cpu_world)
    : Trainer(std::move(config), &source, launch, std::move(cpu_world)) {}

Trainer::Trainer(Config config, const SampleSource* source, const LaunchInfo& launch,
                 std::shared_ptr<Communicator> cpu_world)
    : config_(std::move(config)),
      layout_(resolve_layout(config_, launch.world_size)),
      vocab_(config_.model.padded_vocab(layout_.tp_size)),
      device_(torch::kCPU),
      dtype_(weights_dtype(config_.precision)),
      loss_guard_(config_.train.max_loss_spike, config_.train.loss_spike_window, config_.train.loss_spike_patience) {
  if (cpu_world && cpu_world->size() != launch.world_size)
    fail("Trainer was given a communicator of size ", cpu_world->size(), " but the launch has WORLD_SIZE=",
         launch.world_size);
  log::set_process(int(launch.rank), int(launch.world_size));
  fail_writes_past_the_file_size_limit();  // checkpoints and logs past `ulimit -f` fail as errors
  CommOptions comm = comm_options(config_);
  cpu_world_ = cpu_world ? std::move(cpu_world) : connect_world(launch, comm);
  // Setup runs in phases that every rank agrees on (parallel/comm/failure.h): a device, file or
  // checkpoint that fails on some ranks only ends all of them, reported once by rank 0. The
  // collectives (groups, publishing loaded weights) run between the phases.
  PipelineSchedule schedule;
  agree(*cpu_world_, [&] {
    if (const std::string dir = rank_log_dir(config_.train); !dir.empty()) {
      log::open_rank_log(str(dir, "/rank-", launch.rank, ".log"), config_.train.log_dir.empty()
                                                                      ? "train.metrics_file (its logs/ folder)"
                                                                      : "train.log_dir");
      FlightRecorder::process().keep_records_in(dir, launch.job, int(launch.rank));
    }
    check_block_registered(config_.model.block);
    check_profile_settings(config_.train, launch.world_size);
    progress_delay_s();  // TRIDENT_PROGRESS_DELAY_S, checked before the heavy work
    device_ = training_device(config_.train.device, launch.local_rank);
    check_precision_runs_on(config_.precision, device_);
    schedule = run_pipeline_schedule(config_, layout_);  // a schedule file read and checked before the model is built
  });
  if (const std::string warning = learning_rate_warning(config_.optimizer.lr); !warning.empty()) log::warn(warning);
  const double peak = config_.train.peak_tflops;
  log_.emplace(config_, layout_, vocab_, peak > 0 ? peak : known_peak_tflops(device_name(device_), config_.precision));
  // On a GPU the time model has a profile for, the log says what it expects of this run, and
  // warns once if the run falls far short of it.
  if (const DeviceProfile* profile = known_profile(device_name(device_))) {
    Hardware hardware;
    hardware.device = *profile;
    hardware.software = build_software(device_);
    hardware.gpus = layout_.world_size();
    const PlanRow row = evaluate_layout(config_, layout_, hardware);
    log_->expect_throughput(row.tokens_per_s, row.tflops_per_gpu, profile->name);
  }
  comm.device = device_;
  groups_ = std::make_unique<ProcessGroups>(device_world(cpu_world_, launch, comm), layout_);
  if (!device_.is_cuda() || config_.train.threads > 0)
    log::info(set_cpu_threads(config_.train.threads, launch.local_world_size));
  if (!device_.is_cuda())
    if (const std::string kept = keep_freed_host_memory(); !kept.empty()) log::info(kept);

  std::optional<ResumePoint> resume;
  agree(*cpu_world_, [&] {
    data_ = source ? std::make_unique<GPTData>(config_, *source) : std::make_unique<GPTData>(config_);
    if (!config_.train.checkpoint_dir.empty()) {
      checkpoints_ = std::make_unique<CheckpointStore>(config_.train.checkpoint_dir);
      saving_ = std::make_unique<CheckpointSaving>(*checkpoints_, *cpu_world_, *groups_, hooks_);
      // The ranks that will write find out now, not after the run, if they cannot.
      if (writes_checkpoint_files(*groups_, layout_))
        checkpoints_->probe_writable(groups_->world().rank());
      resume = find_resume_point(*checkpoints_, config_);
    }
    model_ = build_parallel_model(config_, layout_, *groups_, vocab_, dtype_, device_);
    // Before ZeRO-3 takes the weights into its shards.
    parameter_count_ = counted_elements(model_.params, groups_->coordinates().tp, layout_.ep_size);
    forward_ = std::make_unique<StageForward>(config_, layout_, std::move(schedule), *groups_, device_, dtype_, *data_,
                                              model_.chunks, hooks_, iteration_);
    const PlacedParameters local{model_.params, groups_->tp_place(), groups_->ep_place()};
    // The weights are final before the optimizer takes them over into its flat buffer.
    if (resume)
      read_weights(resume->folder, local);
    else if (!config_.train.init_from.empty())
      place_parameters(read_hugging_face(config_.train.init_from, config_.model), local,
                       str("train.init_from '", config_.train.init_from, "'"));
    ZeroOptions zero;
    zero.stage = layout_.zero_stage;
    zero.bucket_bytes = int64_t(config_.parallel.bucket_mb * (1 << 20));
    zero.main_dtype = dtype_ == torch::kDouble ? torch::kDouble : torch::kFloat;
    zero.offload = layout_.offload;
    zero.fuse_weight_grads = config_.model.fused_kernels;
    zero.units = model_.units;
    // Each parameter group's optimizer over the ranks holding its copies: the data- and
    // context-parallel ranks for dense weights, the expert-data-parallel ones for experts.
    optimizer_ = std::make_unique<ParameterGroups>(model_.params, *groups_, layout_, config_.optimizer, zero);
    if (auto sharded = optimizer_->sharded_weights())
      for (auto& chunk : model_.chunks) chunk->gather_weights_through(sharded);
    scaler_ = std::make_unique<LossScaler>(config_.loss_scale, config_.precision);
    if (resume) {
      read_optimizer_state(resume->folder, local, resume->progress, *optimizer_);
      scaler_->restore(resume->progress.loss_scale);
    }
  });
  auto total = torch::full({1}, double(parameter_count_), torch::dtype(torch::kDouble).device(device_));
  groups_->mp_group().all_reduce(total, ReduceOp::sum);  // one replica's ranks hold the model once
  parameter_count_ = int64_t(total.item<double>());
  if (resume) {
    optimizer_->publish();
    iteration_ = resume->progress.iteration;
    for (auto& chunk : model_.chunks)
      if (ExpertBias* bias = chunk->expert_bias()) bias->restore(resume->progress.expert_bias);
    saving_->resumed_at(iteration_);
    consumed_samples_ = resume->progress.consumed_samples;
    // From a checkpoint after which a run stopped, the rerun (a lower learning rate, say) gets a
    // fresh row of high losses: the one it carries is what stopped that run.
    if (resume->warning.empty())
      loss_guard_.restore(resume->progress.recent_losses, resume->progress.unhealthy_losses,
                          resume->progress.first_unhealthy);
    else
      loss_guard_.restore(resume->progress.recent_losses);
    log::info(str("resumed from ", resume->folder, " at iteration ", iteration_, " (", consumed_samples_,
                  " samples consumed)"));
    if (!resume->interrupted.empty()) {  // finishes the interrupted save's commit, as every rank agrees
      agree(*cpu_world_, [&] {
        if (groups_->world().rank() == 0) checkpoints_->move_latest(iteration_);
      });
      log::warn(resume->interrupted);
    }
    if (!resume->warning.empty()) log::warn(resume->warning), resumed_unhealthy_ = iteration_;
  } else if (!config_.train.init_from.empty()) {
    log::info(str("initialized the weights from train.init_from '", config_.train.init_from, "'"));
  }
}

}  // namespace trident
