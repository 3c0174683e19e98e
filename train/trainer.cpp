#include "train/trainer.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/plan/flops.h"
#include "core/plan/planner.h"
#include "core/progress.h"
#include "core/text.h"
#include "optim/finalize_grads.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "train/auxiliary_values.h"
#include "train/expert_balance.h"
#include "optim/lr_schedule.h"
#include "optim/parameter_groups.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/process_groups.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/tensors.h"
#include "train/checkpoint_saving.h"
#include "train/data/samples.h"
#include "train/device.h"
#include "train/divergence_stop.h"
#include "train/evaluation.h"
#include "train/profile.h"
#include "train/program_scalars.h"
#include "train/stage_forward.h"
#include "train/stop_signals.h"

namespace trident {
namespace {

int64_t validation_samples(const GPTData& data) {
  int64_t samples = 0;
  for (const auto& dataset : data.validation) samples += dataset.valid->size();
  return samples;
}

}  // namespace

Trainer::~Trainer() = default;

// An iteration whose loss, gradient norm and time are still on the device: train() reads them
// at log intervals only, so the host runs ahead of the GPU in between.
struct Trainer::PendingStep {
  IterationMetrics metrics;  // all but what the device still computes
  torch::Tensor loss, grad_norm, auxiliary, expert_load;
  std::unique_ptr<IntervalTimer> timer;
  bool completed = false;  // metrics hold the device's numbers, and the after_step hook has seen them
};

IterationMetrics Trainer::step() {
  PendingStep pending = run_step();
  return complete(pending);
}

Trainer::PendingStep Trainer::run_step() {
  if (hooks_.before_step)
    run_hook("before_step", iteration_ + 1, layout_.world_size(), [&] { hooks_.before_step(iteration_ + 1); });
  PendingStep pending;
  if (iteration_ + 1 == config_.train.profile_iteration) {
    profiling_ = true;
    if (profiles_rank(config_.train, groups_->world().rank()))
      profile_ = std::make_unique<IterationProfile>(device_, config_.train.profile_shapes);
  }
  pending.timer = std::make_unique<IntervalTimer>(device_);
  pending.timer->start();
  for (auto& chunk : model_.chunks) {
    chunk->train();
    chunk->begin_iteration(iteration_ + 1);
  }
  const double lr = learning_rate(config_.optimizer, iteration_ + 1, config_.train.iters);
  optimizer_->zero_grads();

  // What each micro-batch back-propagates, in this one place: its mean loss / M, so that the M
  // micro-batches add up to this rank's mean (the average over the data- and context-parallel
  // ranks, each holding as many tokens, then makes it the global batch's), times fp16's loss
  // scale. With data.eod_mask_loss the tokens that do not count add zero to each mean, and the
  // global batch's tokens over those that count (loss_normalizer) makes it the mean over these.
  const double loss_scale = scaler_->scale();
  const double divisor = double(layout_.micro_batches) / forward_->loss_normalizer(*data_->train, consumed_samples_);
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  // A block's auxiliary loss counts as the mean over the micro-batches, as the token loss does.
  for (auto& chunk : model_.chunks) {
    chunk->auxiliary_losses().begin_iteration(loss_scale / double(layout_.micro_batches));
    if (ExpertLoad* load = chunk->expert_load()) load->begin_iteration();
  }
  const PipelineStats stats = run_pipeline(
      groups_->pp_group(), forward_->pipeline(),
      [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
        torch::Tensor out = (*forward_)(*data_->train, consumed_samples_, chunk, micro, input);
        if (!model_.chunks[size_t(chunk)]->stage().head) return out;
        loss_sum += out.detach().to(torch::kDouble) / divisor;
        return out * (loss_scale / divisor);
      },
      [&] { optimizer_->arm_grads(); });
  const torch::Tensor grad_norm = finalize_grads(*optimizer_, *groups_) / loss_scale;
  // The loss lives on the last stage; the sum over the pipeline brings it to every rank.
  groups_->pp_group().all_reduce(loss_sum, ReduceOp::sum);
  groups_->dp_cp_group().all_reduce(loss_sum, ReduceOp::avg);
  pending.auxiliary = auxiliary_values(model_.chunks, *groups_, layout_.micro_batches, device_);
  pending.expert_load = expert_load_counts(model_.chunks, *groups_, device_);
  // DeepSeek-V3's bias moves with the iteration's load, on every rank alike.
  for (auto& chunk : model_.chunks)
    if (ExpertBias* bias = chunk->expert_bias()) bias->update(pending.expert_load);
  // Only fp16's loss scaler has to look at the norm on the host (to skip a step).
  const bool stepped = !scaler_->dynamic() || scaler_->update(std::isfinite(grad_norm.item<double>()));
  if (scaler_->skipped_in_a_row() > config_.loss_scale.max_consecutive_skips)
    stop_diverged(checkpoints_.get(), groups_->world().rank() == 0, int(layout_.world_size()),
                  str("the fp16 gradients overflowed in ", scaler_->skipped_in_a_row(), " steps in a row ",
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
  if (profiling_ && iteration_ == last_profiled_iteration(config_.train)) {
    profiling_ = false;
    const std::string iterations = profiled_iterations(config_.train);
    const std::string table =
        profile_ ? profile_->finish(config_.train.profile_dir, groups_->world().rank(), iterations) : "";
    profile_.reset();
    const std::string& ranks = config_.train.profile_ranks;
    if (groups_->world().rank() == 0)
      log::info(str("profiled ", iterations, " (",
                    ranks == "all" ? std::string("every rank's trace and table") : "the traces and tables of ranks " + ranks,
                    " in ", config_.train.profile_dir, "/)", table.empty() ? "" : ": " + table));
  }
  return pending;
}

IterationMetrics Trainer::complete(PendingStep& pending) {
  if (pending.completed) return pending.metrics;
  pending.completed = true;
  IterationMetrics& m = pending.metrics;
  m.loss = last_loss_ = pending.loss.item<double>();
  m.auxiliary_losses = named_auxiliary_values(pending.auxiliary);
  m.expert_balance = expert_balance_values(pending.expert_load, config_.model.moe_expert_capacity_factor > 0);
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
      stop_diverged(checkpoints_.get(), groups_->world().rank() == 0, int(layout_.world_size()), verdict.why,
                    m.iteration, loss_guard_.first_unhealthy() < 0 ? m.iteration : loss_guard_.first_unhealthy());
    if (verdict.kind == LossVerdict::Kind::spike) log::warn(str("iteration ", m.iteration, ": ", verdict.why));
    // Resumed from a checkpoint marked unhealthy, and the loss after it passed: healthy after all.
    if (verdict.kind == LossVerdict::Kind::healthy && resumed_unhealthy_ && m.iteration == *resumed_unhealthy_ + 1 &&
        groups_->world().rank() == 0)
      checkpoints_->clear_unhealthy(*resumed_unhealthy_);
  }
  if (hooks_.after_step) {
    run_hook("after_step", m.iteration, layout_.world_size(), [&] {
      hooks_.after_step(m);
      check_scalar_names(m);
    });
    if (cpu_world_->size() > 1) gather_program_scalars(*cpu_world_, m);
  }
  return m;
}

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
    fail("evaluate() needs validation data: ", config_.data.type == DataType::program ? "give SampleSource::valid"
                                                                               : "set data.valid_fraction > 0 or data.valid_path");
  return trident::evaluate_datasets(data_->validation, config_.train.eval_iters, config_.batch.global_batch_size,
                                    *forward_, *cpu_world_, iteration_);
}

double Trainer::evaluate() {
  IterationMetrics m;
  validate_into(m);
  return m.valid_loss;
}

CheckpointRequest Trainer::checkpoint_request() const {
  ExpertBias* bias = model_.chunks.front()->expert_bias();  // every chunk holds every layer's, alike
  const TrainingProgress progress{iteration_,           consumed_samples_,
                                  optimizer_->steps(),  scaler_->state(),
                                  loss_guard_.history(), loss_guard_.unhealthy_losses(),
                                  loss_guard_.first_unhealthy(), bias ? bias->values() : std::vector<double>{}};
  return {{model_.params, groups_->tp_place(), groups_->ep_place()}, *optimizer_, progress, config_, last_loss_};
}

void Trainer::save_checkpoint() {
  if (!saving_) fail("save_checkpoint() needs train.checkpoint_dir");
  saving_->save(checkpoint_request());
}

int Trainer::agree_on_control() {
  StopVote mine{stop_signal(), stop_requested_, saving_ && saving_->pending() && !saving_->written()};
  if (config_.train.exit_after_minutes > 0 && since_built_.elapsed_s() / 60 >= config_.train.exit_after_minutes)
    mine.signal = kTimeLimit;
  StopVote agreed = agree_on_stop(*cpu_world_, mine);
  if (saving_ && saving_->pending() && !agreed.writing) {
    saving_->publish();
    // A stop asked for in after_save holds before the next step, as after a synchronous save.
    if (!agreed.signal && !agreed.requested) agreed.requested = agree_on_stop(*cpu_world_, {0, stop_requested_}).requested;
  }
  return agreed_stop(agreed);
}

TrainingEnd Trainer::train() {
  const auto& t = config_.train;
  log_->start(groups_->world().backend(), device_, parameter_count_,
             str(data_->describe(), "; ", data_->train->size(), " train / ", validation_samples(*data_),
                 " validation samples"));
  if (iteration_ >= t.iters) {
    log::info(str("already at iteration ", iteration_, ", train.iters=", t.iters, ": nothing to do"));
    stop_requested_ = false;  // nothing to stop: a later train() runs on
    return {};
  }
  log_->open_metrics(/*resumed_at=*/iteration_, groups_->world().backend(), device_, parameter_count_);
  if (const std::string warning = resumed_inside_profile(t, iteration_); !warning.empty()) log::warn(warning);
  const int64_t first_iteration = iteration_;
  reset_peak_memory(device_);
  // Iterations queue up on the device; their numbers are read (one synchronisation) when one
  // of them is logged, validated or checkpointed.
  std::vector<PendingStep> pending;
  int stop = 0;
  int64_t last_reported = first_iteration;
  stragglers_.restart();
  // The first iteration allocates, picks kernels and fills the pipeline: on a terminal, its
  // seconds count up until its log line.
  std::optional<Progress> warm_up(std::in_place, "first iteration (warm-up)");
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
    for (auto& step : pending) complete(step);
    // The training steps' figures (before validation and saving, which the next interval leaves out too).
    std::optional<StragglerFigures> stragglers;
    if (logged && cpu_world_->size() > 1) stragglers = stragglers_.measure(*cpu_world_);
    for (auto& step : pending) {
      IterationMetrics m = complete(step);
      if (m.iteration == first_iteration + 1) {
        warm_up.reset();
        log_->memory(optimizer_->memory(), device_);
      }
      if (m.iteration == it && logged) {
        m.stragglers = stragglers;
        m.memory = allocator_stats(device_);
      }
      if (m.iteration == it && validate) {
        validate_into(m);
        if (hooks_.after_validation && !std::isnan(m.valid_loss))
          run_hook("after_validation", it, layout_.world_size(), [&] { hooks_.after_validation(m); });
      }
      if (m.iteration % t.log_interval == 0 || m.iteration == t.iters || !std::isnan(m.valid_loss) ||
          (stop && m.iteration == it))
        log_->iteration(m);
      log_->record(m);
    }
    pending.clear();
    if (stragglers) log::info(straggler_line(*stragglers, last_reported + 1, it));
    if (logged) {
      last_reported = it;
      reset_peak_memory(device_);
    }
    if (save && t.async_save) saving_->start_background(checkpoint_request());
    else if (save) save_checkpoint();
    // A stop asked for after validating or saving (hooks) holds before the next step: the
    // checkpoint then holds the weights just validated.
    if ((validate || save) && !stop) stop = agree_on_control();
    if (stragglers) stragglers_.restart();  // validation and saving belong to no interval
  }
  if (checkpoints_) save_checkpoint();  // publishes a background save; saves unless done already
  stop_requested_ = false;                         // honoured: a later train() runs on
  if (!stop || iteration_ >= t.iters) return {};  // a stop asked for at the very end changes nothing
  const TrainingEnd end = stopped_by(stop);
  const std::string kept = checkpoints_ ? str("saved in ", checkpoints_->path(iteration_), "; the same command resumes")
                                        : "nothing saved: train.checkpoint_dir is not set";
  log::info(str("stopped by ", end.stopped_by, " after iteration ", iteration_, " of ", t.iters, ": ", kept,
                " (exit code ", end.exit_code, ")"));
  return end;
}

}  // namespace trident
