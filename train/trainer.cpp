#include "train/trainer.h"

#include <torch/utils.h>

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/plan/flops.h"
#include "core/plan/planner.h"
#include "core/text.h"
#include "core/timer.h"
#include "optim/finalize_grads.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/zero.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/process_groups.h"
#include "parallel/context_parallel.h"
#include "parallel/pipeline.h"
#include "train/checkpoint/background_save.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/hugging_face.h"
#include "train/checkpoint/tensors.h"
#include "train/data/samples.h"
#include "train/device.h"
#include "train/loss_guard.h"
#include "train/profile.h"
#include "train/stop_signals.h"

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
  agree(*cpu_world_, [&] {
    if (const std::string dir = rank_log_dir(config_.train); !dir.empty()) {
      log::open_rank_log(str(dir, "/rank-", launch.rank, ".log"), config_.train.log_dir.empty()
                                                                      ? "train.metrics_file (its logs/ folder)"
                                                                      : "train.log_dir");
      FlightRecorder::process().keep_records_in(dir, launch.job, int(launch.rank));
    }
    check_block_registered(config_.model.block);
    check_profile_settings(config_.train);
    device_ = training_device(config_.train.device, launch.local_rank);
    check_precision_runs_on(config_.precision, device_);
  });
  if (const std::string warning = learning_rate_warning(config_.optimizer.lr); !warning.empty()) log::warn(warning);
  const double peak = config_.train.peak_tflops;
  log_.emplace(config_, layout_, vocab_, peak > 0 ? peak : known_peak_tflops(device_name(device_), config_.precision));
  // On a GPU the time model has a profile for, the log warns once if the run falls far short of it.
  if (const DeviceProfile* profile = known_profile(device_name(device_))) {
    Hardware hardware;
    hardware.device = *profile;
    hardware.software = build_software();
    hardware.gpus = layout_.world_size();
    log_->expect_throughput(evaluate_layout(config_, layout_, hardware).tflops_per_gpu, profile->name);
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
      // The ranks that will write find out now, not after the run, if they cannot.
      if (writes_checkpoint_files(*groups_, layout_.zero().sharded()))
        checkpoints_->probe_writable(groups_->world().rank());
      resume = find_resume_point(*checkpoints_, config_);
    }
    model_ = build_parallel_model(config_, layout_, *groups_, vocab_, dtype_, device_);
    const PlacedParameters local{model_.params, groups_->tp_place()};
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
    zero.units = model_.units;
    // Replicated weights have copies on every data- and context-parallel rank: their gradients
    // are averaged over both, and ZeRO shards over both.
    optimizer_ = std::make_unique<ZeroOptimizer>(model_.params, groups_->dp_cp_group(), config_.optimizer, zero);
    if (auto sharded = optimizer_->sharded_weights())
      for (auto& chunk : model_.chunks) chunk->gather_weights_through(sharded);
    scaler_ = std::make_unique<LossScaler>(config_.loss_scale, config_.precision);
    if (resume) {
      read_optimizer_state(resume->folder, local, resume->progress, *optimizer_);
      scaler_->restore(resume->progress.loss_scale);
    }
  });
  if (resume) {
    optimizer_->publish();
    iteration_ = last_saved_ = resume->progress.iteration;
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

Trainer::~Trainer() = default;

void Trainer::run_hook(const char* name, int64_t iteration, const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    const Error error(str("the program's hook ", name, " at iteration ", iteration, ": ", describe(e)));
    if (layout_.world_size() == 1) throw error;
    std::_Exit(report_failure(error, int(layout_.world_size())));  // ends the job (never returns)
  }
}

// An iteration whose loss, gradient norm and time are still on the device: train() reads them
// at log intervals only, so the host runs ahead of the GPU in between.
struct Trainer::PendingStep {
  IterationMetrics metrics;  // all but what the device still computes
  torch::Tensor loss, grad_norm;
  std::unique_ptr<IntervalTimer> timer;
  bool completed = false;  // metrics hold the device's numbers, and the after_step hook has seen them
};

IterationMetrics Trainer::step() {
  PendingStep pending = run_step();
  return complete(pending);
}

Trainer::PendingStep Trainer::run_step() {
  if (hooks_.before_step) run_hook("before_step", iteration_ + 1, [&] { hooks_.before_step(iteration_ + 1); });
  PendingStep pending;
  if (iteration_ + 1 == config_.train.profile_iteration) profile_ = std::make_unique<IterationProfile>(device_);
  pending.timer = std::make_unique<IntervalTimer>(device_);
  pending.timer->start();
  for (auto& chunk : model_.chunks) {
    chunk->train();
    chunk->begin_iteration(iteration_ + 1);
  }
  const double lr = learning_rate(config_.optimizer, iteration_ + 1, config_.train.iters);
  DataParallelGrads& grads = optimizer_->grads();
  grads.zero();

  // What each micro-batch back-propagates, in this one place: its mean loss / M, so that the M
  // micro-batches add up to this rank's mean (the average over the data- and context-parallel
  // ranks, each holding as many tokens, then makes it the global batch's), times fp16's loss
  // scale. With data.eod_mask_loss the tokens that do not count add zero to each mean, and the
  // global batch's tokens over those that count (loss_normalizer) makes it the mean over these.
  const double loss_scale = scaler_->scale();
  const double divisor = double(layout_.micro_batches) / loss_normalizer(*data_->train, consumed_samples_);
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  const PipelineStats stats = run_pipeline(
      groups_->pp_group(), pipeline_options(),
      [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
        torch::Tensor out = stage_forward(*data_->train, consumed_samples_, chunk, micro, input);
        if (!model_.chunks[size_t(chunk)]->stage().head) return out;
        loss_sum += out.detach().to(torch::kDouble) / divisor;
        return out * (loss_scale / divisor);
      },
      [&] { grads.arm(); });
  const torch::Tensor grad_norm = finalize_grads(*optimizer_, *groups_, model_.roles()) / loss_scale;
  // The loss lives on the last stage; the sum over the pipeline brings it to every rank.
  groups_->pp_group().all_reduce(loss_sum, ReduceOp::sum);
  groups_->dp_cp_group().all_reduce(loss_sum, ReduceOp::avg);
  // Only fp16's loss scaler has to look at the norm on the host (to skip a step).
  const bool stepped = !scaler_->dynamic() || scaler_->update(std::isfinite(grad_norm.item<double>()));
  if (scaler_->skipped_in_a_row() > config_.loss_scale.max_consecutive_skips)
    diverged(str("the fp16 gradients overflowed in ", scaler_->skipped_in_a_row(), " steps in a row ",
                 "(more than loss_scale.max_consecutive_skips) down to a loss scale of ", scaler_->scale()),
             iteration_ + 1, iteration_ + 1);
  if (stepped) {
    optimizer_->scale_grads(clip_coefficient(grad_norm, config_.optimizer.clip_grad) / loss_scale);
    optimizer_->step(lr);
  }
  pending.timer->stop();

  ++iteration_;
  consumed_samples_ += config_.batch.global_batch_size;
  IterationMetrics& m = pending.metrics;
  m.iteration = iteration_;
  m.consumed_samples = consumed_samples_;
  m.learning_rate = lr;
  m.loss_scale = loss_scale;
  m.skipped = !stepped;
  m.skipped_total = scaler_->skipped();
  m.max_in_flight = stats.max_in_flight;
  m.pipeline_transfer_ms = stats.transfer_ms;
  pending.loss = loss_sum;
  pending.grad_norm = grad_norm;
  if (profile_) {
    const std::string table = profile_->finish(config_.train.profile_dir, groups_->world().rank(), iteration_);
    profile_.reset();
    if (groups_->world().rank() == 0)
      log::info(str("profiled iteration ", iteration_, " (every rank's trace and table in ", config_.train.profile_dir,
                    "/): ", table));
  }
  return pending;
}

IterationMetrics Trainer::complete(PendingStep& pending) {
  if (pending.completed) return pending.metrics;
  pending.completed = true;
  IterationMetrics& m = pending.metrics;
  m.loss = last_loss_ = pending.loss.item<double>();
  m.grad_norm = pending.grad_norm.item<double>();
  m.elapsed_ms = pending.timer->elapsed_ms();
  log_->add_rates(m);
  // A fresh run's first loss tells whether the initial weights make sense.
  if (m.iteration == 1 && config_.train.init_from.empty())
    if (const std::string warning = first_loss_warning(m.loss, vocab_, config_.model.init_method_std); !warning.empty())
      log::warn(warning);
  if (!m.skipped) {
    const LossVerdict verdict =
        std::isfinite(m.grad_norm)
            ? loss_guard_.check(m.loss, m.iteration)
            : LossVerdict{LossVerdict::Kind::diverged, str("the loss is ", m.loss, " and the gradient norm ", m.grad_norm)};
    if (verdict.kind == LossVerdict::Kind::diverged)  // from the first of the row's losses (this one, for a nan norm)
      diverged(verdict.why, m.iteration, loss_guard_.first_unhealthy() < 0 ? m.iteration : loss_guard_.first_unhealthy());
    if (verdict.kind == LossVerdict::Kind::spike) log::warn(str("iteration ", m.iteration, ": ", verdict.why));
    // Resumed from a checkpoint marked unhealthy, and the loss after it passed: healthy after all.
    if (verdict.kind == LossVerdict::Kind::healthy && resumed_unhealthy_ && m.iteration == *resumed_unhealthy_ + 1 &&
        groups_->world().rank() == 0)
      checkpoints_->clear_unhealthy(*resumed_unhealthy_);
  }
  if (hooks_.after_step)
    run_hook("after_step", m.iteration, [&] {
      hooks_.after_step(m);
      check_scalar_names(m);
    });
  return m;
}

void Trainer::diverged(const std::string& what, int64_t iteration, int64_t first_bad) const {
  // Every rank sees the same reduced loss and norm, so every rank stops here together. The
  // checkpoints from the iteration before the first bad loss on hold the weights that gave the
  // bad losses: recorded, so that rotation and a resume from them know (best effort: the error
  // below is what matters).
  if (checkpoints_ && groups_->world().rank() == 0)
    for (int64_t saved : checkpoints_->iterations())
      if (saved >= first_bad - 1 && saved < iteration) try {
          checkpoints_->mark_unhealthy(saved, str("iteration ", iteration, ": ", what));
        } catch (const std::exception& e) {
          log::warn(str("could not mark ", checkpoints_->path(saved), " unhealthy (", e.what(), "): do not resume ",
                        "from it, nor let a later save's rotation count on it"));
        }
  const std::string saved = checkpoints_ ? recovery_advice(*checkpoints_, first_bad) : "no checkpoint was saved";
  throw JobError::everywhere(str("iteration ", iteration, ": ", what, ": training diverged; stopped ",
                                 "before saving anything at this iteration (", saved, ")"),
                             int(layout_.world_size()));
}

namespace {

int64_t validation_samples(const GPTData& data) {
  int64_t samples = 0;
  for (const auto& dataset : data.validation) samples += dataset.valid->size();
  return samples;
}

}  // namespace

void Trainer::validate_into(IterationMetrics& m) {
  const std::vector<double> losses = evaluate_datasets();
  if (losses.empty()) return;  // cut short by a stop signal: no validation loss
  m.valid_loss = 0;
  for (size_t d = 0; d < losses.size(); ++d) m.valid_loss += data_->validation[d].weight * losses[d];
  if (losses.size() > 1)
    for (size_t d = 0; d < losses.size(); ++d) m.valid_losses.emplace_back(data_->validation[d].name, losses[d]);
}

std::vector<double> Trainer::evaluate_datasets() {
  if (!data_->validates())
    fail("evaluate() needs validation data: ", config_.data.type == "program" ? "give SampleSource::valid"
                                                                               : "set data.valid_fraction > 0 or data.valid_path");
  torch::NoGradGuard no_grad;
  for (auto& chunk : model_.chunks) chunk->eval();
  // A stop signal cuts a validation short before its next batch (every rank agrees), so that a
  // run stops within one step or one validation batch of the signal, then saves.
  const auto stop_agreed = [&] {
    auto stop = torch::tensor({int64_t(stop_signal())}, torch::kLong);
    cpu_world_->all_reduce(stop, ReduceOp::max);
    return int(stop.item<int64_t>());
  };
  std::vector<double> losses;
  int64_t done = 0;
  for (const DatasetPart& dataset : data_->validation) {
    auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
    for (int64_t i = 0; i < config_.train.eval_iters; ++i, ++done) {
      if (const int stop = stop_agreed()) {
        log::warn(str("validation at iteration ", iteration_, " cut short by ", signal_name(stop), " after ", done,
                      " of ", config_.train.eval_iters * int64_t(data_->validation.size()), " batches: no validation ",
                      "loss for it"));
        return {};
      }
      const int64_t consumed = i * config_.batch.global_batch_size;
      const double divisor = double(layout_.micro_batches) / loss_normalizer(*dataset.valid, consumed);
      run_pipeline_forward(groups_->pp_group(), pipeline_options(),
                           [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
                             auto out = stage_forward(*dataset.valid, consumed, chunk, micro, input);
                             if (model_.chunks[size_t(chunk)]->stage().head) total += out.to(torch::kDouble) / divisor;
                             return out;
                           });
    }
    groups_->pp_group().all_reduce(total, ReduceOp::sum);
    groups_->dp_cp_group().all_reduce(total, ReduceOp::avg);
    losses.push_back(total.item<double>() / double(config_.train.eval_iters));
  }
  return losses;
}

double Trainer::evaluate() {
  IterationMetrics m;
  validate_into(m);
  return m.valid_loss;
}

PipelineOptions Trainer::pipeline_options() const {
  PipelineOptions options;
  options.schedule = layout_.schedule;
  options.micro_batches = layout_.micro_batches;
  options.virtual_stages = layout_.virtual_stages;
  options.activation_shape = {layout_.micro_batch, layout_.local_sequence(config_.model.seq_length),
                              config_.model.hidden_size};
  options.activation_options = torch::TensorOptions().dtype(dtype_).device(device_);
  return options;
}

torch::Tensor Trainer::stage_forward(const Samples& samples, int64_t consumed, int64_t chunk, int64_t micro,
                                     const torch::Tensor& input) {
  GPT& model = model_.chunks[size_t(chunk)];
  const bool first = model->stage().embedding, last = model->stage().head;
  const DataConfig& data = config_.data;
  const int64_t size = layout_.micro_batch;
  Batch batch;
  if (first || last || data.documents())  // every layer needs the documents
    batch = samples.batch(sample_position(consumed, micro, size, groups_->coordinates().dp, layout_.dp_size), size);
  // This rank's chunks of each sequence; from pinned memory, copies to the GPU do not make the
  // host wait for them.
  const auto& at = groups_->coordinates();
  auto to_device = [&](const torch::Tensor& t) {
    return device_.is_cuda() ? t.pin_memory().to(device_, /*non_blocking=*/true) : t;
  };
  auto rank_chunks = [&](const torch::Tensor& whole) {
    return to_device(context_parallel_slice(whole, 1, at.cp, int(layout_.cp_size)).contiguous());
  };
  Documents documents;
  if (data.documents()) {
    const PackedDocuments packed = packed_documents(batch.tokens, data_->end_of_document);
    if (data.reset_attention_mask) documents.ids = to_device(packed.ids);  // the whole sequence's
    if (data.reset_position_ids) documents.positions = rank_chunks(packed.positions);
  }
  const torch::Tensor x = first ? rank_chunks(batch.tokens) : input;
  if (!last) return model->forward(x, documents);
  const torch::Tensor mask = loss_mask(batch);
  TokenLoss token_loss;
  if (hooks_.loss)
    token_loss = [this](const torch::Tensor& logits, const torch::Tensor& targets, Communicator& tp) {
      torch::Tensor losses;
      const bool training = model_.chunks.front()->is_training();
      run_hook("loss", training ? iteration_ + 1 : iteration_, [&] {
        losses = hooks_.loss(logits, targets, tp);
        check_program_loss(losses, targets, tp);
      });
      return losses;
    };
  return model->loss(x, rank_chunks(batch.targets), documents, mask.defined() ? rank_chunks(mask) : mask, token_loss);
}

void Trainer::check_program_loss(const torch::Tensor& losses, const torch::Tensor& targets, Communicator& tp) {
  if (!losses.defined() || !losses.is_floating_point() || losses.sizes() != targets.sizes())
    fail("Hooks::loss must return one floating-point loss per token (shape [", targets.numel(), "]), not ",
         losses.defined() ? trident::str(losses.scalar_type(), " of shape ", losses.sizes()) : std::string("an empty tensor"));
  // Every tensor-parallel rank must return the same losses (reduced over the vocabulary shards,
  // whose all-reduces give every rank the same bits): a rank-local term would train each rank on
  // a loss of its own. Checked at the first call, to keep the device unsynchronised after it
  // (rank-local terms show at every call).
  if (program_loss_checked_ || tp.size() == 1) return;
  program_loss_checked_ = true;
  const torch::Tensor sum = losses.detach().to(torch::kDouble).sum();
  torch::Tensor bounds = torch::stack({sum, -sum});  // the max of both: the highest sum, minus the lowest
  tp.all_reduce(bounds, ReduceOp::max);
  const double high = bounds[0].item<double>(), low = -bounds[1].item<double>();
  if (!std::isfinite(high) || !std::isfinite(low)) {
    program_loss_checked_ = false;  // the loss guard speaks of a loss that is not finite; compare at the next call
    return;
  }
  if (high != low)
    fail("Hooks::loss returned different losses on the tensor-parallel ranks (their sums over the micro-batch differ "
         "by ", high - low, "): reduce what each rank computes on its vocabulary shard over `tp`, as "
         "vocab_parallel_cross_entropy does");
}

torch::Tensor Trainer::loss_mask(const Batch& batch) const {
  torch::Tensor mask = batch.loss_mask;
  if (config_.data.eod_mask_loss) {
    const torch::Tensor not_end = batch.tokens.ne(data_->end_of_document).to(torch::kUInt8);
    mask = mask.defined() ? mask * not_end : not_end;
  }
  return mask;
}

double Trainer::loss_normalizer(const Samples& samples, int64_t consumed) const {
  if (!config_.data.eod_mask_loss && !samples.has_loss_mask()) return 1;
  const torch::Tensor mask = loss_mask(samples.batch(consumed, config_.batch.global_batch_size));
  const int64_t counted = mask.sum().item<int64_t>();
  if (counted == 0)
    fail("no target of the global batch at sample ", consumed, " of ", &samples == data_->train.get() ? "training" : "validation",
         " counts towards the loss (", samples.has_loss_mask() ? "the program's loss masks" : "",
         samples.has_loss_mask() && config_.data.eod_mask_loss ? " with " : "",
         config_.data.eod_mask_loss ? "data.eod_mask_loss, no loss where the input is the end-of-document token" : "",
         "); there is no loss to take");
  return double(mask.numel()) / double(counted);
}

CheckpointRequest Trainer::checkpoint_request() const {
  const TrainingProgress progress{iteration_,           consumed_samples_,
                                  optimizer_->steps(),  scaler_->state(),
                                  loss_guard_.history(), loss_guard_.unhealthy_losses(),
                                  loss_guard_.first_unhealthy()};
  return {{model_.params, groups_->tp_place()}, *optimizer_, progress, config_, last_loss_};
}

void Trainer::save_checkpoint() {
  if (!checkpoints_) fail("save_checkpoint() needs train.checkpoint_dir");
  if (background_save_) publish_background_save();
  if (last_saved_ == iteration_) return;  // saved (or resumed from) already: the same on every rank
  const std::string folder = checkpoints_->path(iteration_);
  if (hooks_.before_save) run_hook("before_save", iteration_, [&] { hooks_.before_save(iteration_, folder); });
  const Stopwatch stopped;
  trident::save_checkpoint(*checkpoints_, *cpu_world_, *groups_, checkpoint_request());
  last_saved_ = iteration_;
  log::info(str("saved checkpoint ", folder, " in ", fixed(stopped.elapsed_s(), 2), " s (training stopped for the write)"));
  if (hooks_.after_save) run_hook("after_save", iteration_, [&] { hooks_.after_save(iteration_, folder); });
}

void Trainer::start_background_save() {
  if (background_save_) publish_background_save();  // one pending save at a time: bounded memory
  if (hooks_.before_save)
    run_hook("before_save", iteration_, [&] { hooks_.before_save(iteration_, checkpoints_->path(iteration_)); });
  const Stopwatch stopped;
  background_save_ = std::make_unique<BackgroundSave>(*checkpoints_, *cpu_world_, *groups_, checkpoint_request());
  last_saved_ = iteration_;
  log::info(str("checkpoint ", checkpoints_->path(iteration_), ": training stopped ", fixed(stopped.elapsed_s(), 2),
                " s to copy the state; writing it in the background"));
}

void Trainer::publish_background_save() {
  std::unique_ptr<BackgroundSave> save = std::move(background_save_);
  const double waited = save->publish();
  const std::string folder = checkpoints_->path(save->iteration());
  log::info(str("saved checkpoint ", folder, ": written in the background in ", fixed(save->write_seconds(), 2),
                " s (training waited ", fixed(waited, 2), " s for it)"));
  if (hooks_.after_save)
    run_hook("after_save", save->iteration(), [&] { hooks_.after_save(save->iteration(), folder); });
}

void Trainer::report_stragglers(int64_t from_iteration) {
  const double blocked = FlightRecorder::process().blocked_seconds();
  const double wall = since_report_.elapsed_s();
  const double waiting = blocked - last_report_blocked_s_;
  since_report_.restart();
  last_report_blocked_s_ = blocked;
  const int n = cpu_world_->size();
  auto all = torch::empty({n, 2}, torch::kDouble);
  cpu_world_->all_gather(all, torch::tensor({wall - waiting, waiting}, torch::kDouble));
  auto compute = all.select(1, 0), wait = all.select(1, 1);
  const int64_t slowest = compute.argmax().item<int64_t>(), fastest = compute.argmin().item<int64_t>();
  const auto sorted = std::get<0>(wait.sort());
  log::info(str("ranks over iterations ", from_iteration, "-", iteration_, ": computing slowest rank ", slowest, " ",
                fixed(compute[slowest].item<double>(), 2), " s, fastest rank ", fastest, " ",
                fixed(compute[fastest].item<double>(), 2), " s; waiting in communication min ",
                fixed(sorted[0].item<double>(), 2), " / median ", fixed(sorted[n / 2].item<double>(), 2), " / max ",
                fixed(sorted[n - 1].item<double>(), 2), " s"));
}

int Trainer::agree_on_control() {
  int64_t stop = stop_signal();
  const double minutes = since_built_.elapsed_s() / 60;
  if (config_.train.exit_after_minutes > 0 && minutes >= config_.train.exit_after_minutes) stop = kTimeLimit;
  const bool writing = background_save_ && !background_save_->written();
  auto flags = torch::tensor({stop, int64_t(stop_requested_), int64_t(writing)}, torch::kLong);
  cpu_world_->all_reduce(flags, ReduceOp::max);
  // A signal or the time limit outranks the program's request: its exit code tells a scheduler why.
  const int agreed = int(flags[0].item<int64_t>());
  bool requested = flags[1].item<int64_t>() != 0;
  if (background_save_ && flags[2].item<int64_t>() == 0) {
    publish_background_save();
    // A stop asked for in after_save holds before the next step, as after a synchronous save.
    if (!agreed && !requested) {
      auto again = torch::tensor({int64_t(stop_requested_)}, torch::kLong);
      cpu_world_->all_reduce(again, ReduceOp::max);
      requested = again.item<int64_t>() != 0;
    }
  }
  return agreed != 0 ? agreed : requested ? kStopRequested : 0;
}

TrainingEnd Trainer::train() {
  const auto& t = config_.train;
  log_->start(groups_->world().backend(), device_,
             str(data_->describe(), "; ", data_->train->size(), " train / ", validation_samples(*data_),
                 " validation samples"));
  if (iteration_ >= t.iters) {
    log::info(str("already at iteration ", iteration_, ", train.iters=", t.iters, ": nothing to do"));
    stop_requested_ = false;  // nothing to stop: a later train() runs on
    return {};
  }
  log_->open_metrics(/*resumed=*/iteration_ > 0);
  const int64_t first_iteration = iteration_;
  reset_peak_memory(device_);
  // Iterations queue up on the device; their numbers are read (one synchronisation) when one
  // of them is logged, validated or checkpointed.
  std::vector<PendingStep> pending;
  int stop = 0;
  int64_t last_reported = first_iteration;
  since_report_.restart();
  last_report_blocked_s_ = FlightRecorder::process().blocked_seconds();
  while (iteration_ < t.iters && !stop) {
    pending.push_back(run_step());
    // A program that reads every step (after_step) reads it now, so a stop it asks for is agreed below.
    if (hooks_.after_step) complete(pending.back());
    const int64_t it = iteration_;
    stop = agree_on_control();
    const bool validate = t.eval_interval > 0 && (it % t.eval_interval == 0 || it == t.iters);
    const bool save = checkpoints_ && t.save_interval > 0 && it % t.save_interval == 0 && !stop;
    const bool logged = it % t.log_interval == 0 || it == t.iters || it == first_iteration + 1 || stop;
    if (!(validate || save || logged)) continue;
    for (auto& step : pending) {
      IterationMetrics m = complete(step);
      if (m.iteration == first_iteration + 1) log_->memory(optimizer_->memory(), device_);
      if (m.iteration == it && validate) {
        validate_into(m);
        if (hooks_.after_validation && !std::isnan(m.valid_loss)) run_hook("after_validation", it, [&] { hooks_.after_validation(m); });
      }
      if (m.iteration % t.log_interval == 0 || m.iteration == t.iters || !std::isnan(m.valid_loss) ||
          (stop && m.iteration == it))
        log_->iteration(m);
      log_->record(m);
    }
    pending.clear();
    if (logged && cpu_world_->size() > 1) report_stragglers(last_reported + 1);
    if (logged) last_reported = it;
    if (save && t.async_save) start_background_save();
    else if (save) save_checkpoint();
    // A stop asked for after validating or saving (hooks) holds before the next step: the
    // checkpoint then holds the weights just validated.
    if ((validate || save) && !stop) stop = agree_on_control();
  }
  if (checkpoints_) save_checkpoint();  // publishes a background save; saves unless done already
  stop_requested_ = false;                         // honoured: a later train() runs on
  if (!stop || iteration_ >= t.iters) return {};  // a stop asked for at the very end changes nothing
  TrainingEnd end{false,
                  stop == kStopRequested ? "request_stop()"
                  : stop == kTimeLimit   ? "train.exit_after_minutes"
                                         : signal_name(stop),
                  stop == kStopRequested ? 0 : stop == kTimeLimit ? 3 : 128 + stop};
  const std::string kept = checkpoints_ ? str("saved in ", checkpoints_->path(iteration_), "; the same command resumes")
                                        : "nothing saved: train.checkpoint_dir is not set";
  log::info(str("stopped by ", end.stopped_by, " after iteration ", iteration_, " of ", t.iters, ": ", kept,
                " (exit code ", end.exit_code, ")"));
  return end;
}

}  // namespace trident
