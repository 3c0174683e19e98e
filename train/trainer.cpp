#include "train/trainer.h"

#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/flops.h"
#include "core/json_line.h"
#include "core/logging.h"
#include "core/memory.h"
#include "core/plan.h"
#include "core/text.h"
#include "optim/finalize_grads.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/zero.h"
#include "parallel/comm.h"
#include "parallel/failure.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/process_groups.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/device.h"

namespace trident {
namespace {

torch::Dtype parameter_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp64: return torch::kDouble;
    case Precision::bf16: return torch::kBFloat16;
    case Precision::fp16: return torch::kHalf;
    case Precision::fp32: return torch::kFloat;
  }
  return torch::kFloat;
}

// LibTorch 1.13 has no fp16 matrix multiply on the CPU (2.x has).
void check_precision_runs_on(Precision precision, const torch::Device& device) {
  if (precision != Precision::fp16 || device.is_cuda()) return;
  try {
    auto x = torch::ones({2, 2}, torch::kHalf);
    (void)torch::mm(x, x);
  } catch (const c10::Error&) {
    fail("precision=fp16 needs train.device=cuda with this LibTorch (it has no fp16 matrix "
         "multiply on the CPU); use precision=bf16 on the CPU");
  }
}

torch::Device training_device(const std::string& device, const LaunchInfo& launch) {
  if (device == "cpu") return torch::kCPU;
  if (!torch::cuda::is_available())
    fail("train.device=cuda, but this LibTorch has no CUDA or sees no GPU; use train.device=cpu");
  return torch::Device(torch::kCUDA, int(launch.local_rank % torch::cuda::device_count()));
}

}  // namespace

Trainer::Trainer(Config config, const LaunchInfo& launch, std::shared_ptr<Communicator> cpu_world)
    : config_(std::move(config)),
      layout_(resolve_layout(config_, launch.world_size)),
      device_(torch::kCPU),
      dtype_(parameter_dtype(config_.precision)),
      vocab_(config_.model.padded_vocab(config_.parallel.tensor)),
      main_dtype_(dtype_ == torch::kDouble ? torch::kDouble : torch::kFloat) {
  log::set_process(int(launch.rank), int(launch.world_size));
  CommOptions comm = comm_options(config_);
  cpu_world_ = cpu_world ? std::move(cpu_world) : connect_world(launch, comm);
  // Setup runs in phases that every rank agrees on (parallel/failure.h): a device, file or
  // checkpoint that fails on some ranks only ends all of them, reported once by rank 0. The
  // collectives (groups, publishing loaded weights) run between the phases.
  agree(*cpu_world_, [&] {
    device_ = training_device(config_.train.device, launch);
    check_precision_runs_on(config_.precision, device_);
  });
  comm.device = device_;
  groups_ = std::make_unique<ProcessGroups>(device_world(cpu_world_, launch, comm), layout_);
  if (config_.train.threads > 0) torch::set_num_threads(int(config_.train.threads));
  peak_tflops_ = config_.train.peak_tflops;

  TrainingProgress progress;
  std::string resume_from;
  agree(*cpu_world_, [&] {
    data_ = std::make_unique<GPTData>(config_);
    resume_from = open_checkpoints(progress);
    build_model_chunks();
    const auto& at = groups_->coordinates();
    // Model weights load before the optimizer makes the parameters views of its flat buffer.
    if (!resume_from.empty()) read_model_shard(resume_from, at.tp, at.pp, chunks_);
    ZeroOptions zero;
    zero.zero_stage = layout_.zero_stage;
    zero.bucket_bytes = int64_t(config_.parallel.bucket_mb * (1 << 20));
    zero.main_dtype = main_dtype_;
    optimizer_ = std::make_unique<ZeroOptimizer>(params_, groups_->dp_group(), config_.optimizer, zero);
    scaler_ = std::make_unique<LossScaler>(config_.loss_scale, config_.precision == Precision::fp16);
    if (!resume_from.empty()) read_optimizer_shards(resume_from, at.tp, at.pp, *optimizer_, *scaler_);
  });
  if (!resume_from.empty()) {
    optimizer_->publish();
    iteration_ = last_saved_ = progress.iteration;
    consumed_samples_ = progress.consumed_samples;
    log::info(str("resumed from ", resume_from, " at iteration ", iteration_, " (",
                  consumed_samples_, " samples consumed)"));
  }
}

Trainer::~Trainer() = default;

std::string Trainer::open_checkpoints(TrainingProgress& progress) {
  if (config_.train.checkpoint_dir.empty()) return "";
  checkpoints_ = std::make_unique<CheckpointStore>(config_.train.checkpoint_dir);
  // Ranks that will write (save_checkpoint) find out now, not after the run, if they cannot.
  const bool writes = groups_->world().rank() == 0 || groups_->coordinates().dp == 0 ||
                      (layout_.zero_stage > 0 && layout_.dp_size > 1);
  if (writes) checkpoints_->probe_writable(groups_->world().rank());
  const int64_t latest = checkpoints_->latest();
  if (latest >= 0 && !config_.train.resume)
    fail("train.checkpoint_dir '", checkpoints_->dir(), "' already holds checkpoints (latest: ",
         "iteration ", latest, "); set train.resume=true to continue from it or choose another ",
         "directory");
  for (int64_t saved : checkpoints_->iterations())
    if (saved > latest)
      fail("train.checkpoint_dir '", checkpoints_->dir(), "' holds '", checkpoints_->path(saved),
           "', newer than its `latest` pointer; this run would overwrite it. Move it away or ",
           "choose another directory");
  if (latest < 0) return "";
  progress = read_progress(checkpoints_->path(latest), config_);
  return checkpoints_->path(latest);
}

void Trainer::build_model_chunks() {
  torch::manual_seed(config_.train.seed);
  // Chunk c of stage r is virtual stage c * p + r: contiguous layers, the embedding on the
  // model's first virtual stage, the head on its last.
  const int64_t p = layout_.pp_size, v = layout_.virtual_stages;
  const int64_t layers = config_.model.num_layers / (p * v);
  for (int64_t c = 0; c < v; ++c) {
    GPT chunk(config_.model, vocab_, TensorParallel{groups_->shared_tp_group(), layout_.sequence_parallel},
              Stage::of(c * p + groups_->coordinates().pp, p * v, layers), config_.recompute);
    chunk->to(dtype_);
    chunk->initialize(config_.train.seed);
    chunk->to(device_);
    for (auto& param : parameters_with_roles(*chunk)) params_.push_back(std::move(param));
    chunks_.push_back(chunk);
  }
}

void Trainer::on_iteration(std::function<void(const IterationMetrics&)> callback) {
  callbacks_.push_back(std::move(callback));
}

// An iteration whose loss, gradient norm and time are still on the device: train() reads them
// at log intervals only, so the host runs ahead of the GPU in between.
struct Trainer::PendingStep {
  IterationMetrics metrics;  // all but what the device still computes
  torch::Tensor loss, grad_norm;
  std::unique_ptr<IntervalTimer> timer;
};

IterationMetrics Trainer::step() {
  PendingStep pending = run_step();
  return complete(pending);
}

Trainer::PendingStep Trainer::run_step() {
  PendingStep pending;
  pending.timer = std::make_unique<IntervalTimer>(device_);
  pending.timer->start();
  for (auto& chunk : chunks_) chunk->train();
  const double lr = learning_rate(config_.optimizer, iteration_ + 1, config_.train.iters);
  DataParallelGrads& grads = optimizer_->grads();
  grads.zero();

  // Each micro-batch's mean loss is scaled by 1/M so the gradients add up to the mean over
  // this rank's share; the data-parallel average then makes it the global-batch mean.
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  const double loss_scale = scaler_->scale();
  const PipelineStats stats = run_pipeline(
      groups_->pp_group(), pipeline_options(),
      [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
        auto out = stage_forward(*data_->train, consumed_samples_, chunk, micro, input, loss_sum);
        return chunks_[size_t(chunk)]->stage().head && loss_scale != 1 ? out * loss_scale : out;
      },
      [&] { grads.arm(); });
  std::vector<ParameterRole> roles;
  for (const auto& param : params_) roles.push_back(param.role);
  const torch::Tensor grad_norm = finalize_grads(*optimizer_, *groups_, roles) / loss_scale;
  // The loss lives on the last stage; the sum over the pipeline brings it to every rank.
  groups_->pp_group().all_reduce(loss_sum, ReduceOp::sum);
  groups_->dp_group().all_reduce(loss_sum, ReduceOp::avg);
  // Only fp16's loss scaler has to look at the norm on the host (to skip a step).
  const bool stepped = !scaler_->dynamic() || scaler_->update(std::isfinite(grad_norm.item<double>()));
  if (scaler_->skipped_in_a_row() > config_.loss_scale.max_consecutive_skips)
    diverged(str("the fp16 gradients overflowed in ", scaler_->skipped_in_a_row(), " steps in a row ",
                 "(more than loss_scale.max_consecutive_skips) down to a loss scale of ", scaler_->scale()),
             iteration_ + 1);
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
  return pending;
}

IterationMetrics Trainer::complete(PendingStep& pending) {
  IterationMetrics m = pending.metrics;
  m.loss = last_loss_ = pending.loss.item<double>();
  m.grad_norm = pending.grad_norm.item<double>();
  m.elapsed_ms = pending.timer->elapsed_ms();
  const auto& batch = config_.batch;
  const double seconds = m.elapsed_ms / 1e3;
  m.tokens_per_second = double(batch.global_batch_size * config_.model.seq_length) / seconds;
  const IterationFlops flops =
      iteration_flops(config_.model, vocab_, batch.global_batch_size, config_.recompute);
  const double per_device = 1e12 * seconds * double(layout_.world_size());
  m.tflops_6pd = flops.six_pd / per_device;
  m.tflops_model = flops.model / per_device;
  m.tflops_hardware = flops.hardware / per_device;
  if (peak_tflops_ > 0) m.mfu = m.tflops_model / peak_tflops_;
  if (!m.skipped && !(std::isfinite(m.loss) && std::isfinite(m.grad_norm)))
    diverged(str("the loss is ", m.loss, " and the gradient norm ", m.grad_norm), m.iteration);
  return m;
}

void Trainer::diverged(const std::string& what, int64_t iteration) const {
  // Every rank sees the same reduced loss and norm, so every rank stops here together.
  std::string saved = "no checkpoint was saved";
  const int64_t latest = checkpoints_ ? checkpoints_->latest() : -1;
  if (latest >= 0 && latest + 1 < iteration) {
    saved = str("the newest checkpoint, ", checkpoints_->path(latest), ", trained on with finite losses");
  } else if (latest >= 0) {
    const int64_t proven = checkpoints_->newest_proven(latest);
    saved = str("the newest checkpoint, ", checkpoints_->path(latest), ", holds the weights that gave this loss");
    if (proven >= 0)
      saved += str("; the one before, ", checkpoints_->path(proven), ", trained on with finite ",
                   "losses: to resume from it, move the newer ones out of ", checkpoints_->dir(),
                   " and write ", std::filesystem::path(checkpoints_->path(proven)).filename().string(),
                   " into its `latest`");
  }
  throw JobError::everywhere(str("iteration ", iteration, ": ", what, ": training diverged; stopped ",
                                 "before saving anything at this iteration (", saved, ")"),
                             int(layout_.world_size()));
}

double Trainer::evaluate() {
  if (!data_->valid) fail("evaluate() needs validation data: set data.valid_fraction > 0");
  torch::NoGradGuard no_grad;
  for (auto& chunk : chunks_) chunk->eval();
  const auto& batch = config_.batch;
  auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  for (int64_t i = 0; i < config_.train.eval_iters; ++i)
    run_pipeline_forward(groups_->pp_group(), pipeline_options(),
                         [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
                           return stage_forward(*data_->valid, i * batch.global_batch_size, chunk,
                                                micro, input, total);
                         });
  groups_->pp_group().all_reduce(total, ReduceOp::sum);
  groups_->dp_group().all_reduce(total, ReduceOp::avg);
  return total.item<double>() / double(config_.train.eval_iters);
}

PipelineOptions Trainer::pipeline_options() const {
  PipelineOptions options;
  options.schedule = layout_.schedule;
  options.micro_batches = layout_.micro_batches;
  options.virtual_stages = layout_.virtual_stages;
  const int64_t seq = config_.model.seq_length / (layout_.sequence_parallel ? layout_.tp_size : 1);
  options.activation_shape = {config_.batch.micro_batch_size, seq, config_.model.hidden_size};
  options.activation_options = torch::TensorOptions().dtype(dtype_).device(device_);
  return options;
}

torch::Tensor Trainer::stage_forward(const GPTSamples& samples, int64_t consumed, int64_t chunk,
                                     int64_t micro, const torch::Tensor& input,
                                     torch::Tensor& loss_sum) {
  GPT& model = chunks_[size_t(chunk)];
  const bool first = model->stage().embedding, last = model->stage().head;
  const int64_t size = config_.batch.micro_batch_size;
  Batch batch;
  if (first || last)
    batch = samples.batch(sample_position(consumed, micro, size, groups_->coordinates().dp, layout_.dp_size), size);
  // From pinned memory, copies to the GPU do not make the host wait for them.
  auto to_device = [&](const torch::Tensor& t) {
    return device_.is_cuda() ? t.pin_memory().to(device_, /*non_blocking=*/true) : t;
  };
  const torch::Tensor x = first ? to_device(batch.tokens) : input;
  if (!last) return model->forward(x);
  auto loss = model->loss(x, to_device(batch.targets)) / double(layout_.micro_batches);
  loss_sum += loss.detach().to(torch::kDouble);
  return loss;
}

void Trainer::save_checkpoint() {
  if (!checkpoints_) fail("save_checkpoint() needs train.checkpoint_dir");
  // World rank 0 prepares and publishes; the first data-parallel replica writes one shard per
  // (TP rank, stage, chunk), each rank its optimizer shard under ZeRO. Every step ends with all
  // ranks agreeing that nobody failed; after a failure the half-written checkpoint is removed
  // and `latest` still names the previous one.
  const bool leader = groups_->world().rank() == 0;
  const bool writer = groups_->coordinates().dp == 0;
  try {
    agree(*cpu_world_, [&] {
      if (leader) checkpoints_->begin(iteration_);
    });
    const auto& at = groups_->coordinates();
    agree(*cpu_world_, [&] {
      if (!writer && !optimizer_->sharded()) return;
      const std::string folder = checkpoints_->staging_path(iteration_);
      std::vector<FileRecord> files;
      auto add = [&](std::vector<FileRecord> more) { files.insert(files.end(), more.begin(), more.end()); };
      if (writer) add(write_model_shard(folder, at.tp, at.pp, chunks_));
      add(write_optimizer_shard(folder, at.tp, at.pp, at.dp, *optimizer_, *scaler_));
      if (leader) add(write_shared_state(folder, {iteration_, consumed_samples_}, config_));
      write_manifest_part(folder, groups_->world().rank(), files);
    });
    agree(*cpu_world_, [&] {
      if (leader) checkpoints_->commit(iteration_, config_.train.keep_checkpoints, last_loss_);
    });
  } catch (const JobError&) {
    if (leader) checkpoints_->abandon(iteration_);
    throw;
  }
  last_saved_ = iteration_;
  log::info(str("saved checkpoint ", checkpoints_->path(iteration_)));
}

void Trainer::log_start() const {
  const auto& m = config_.model;
  log::info(str("trident: ", layout_.world_size(), " process(es) (", groups_->world().backend(),
                "), TP ", layout_.tp_size, " x PP ",
                layout_.pp_size, " x DP ", layout_.dp_size, ", ", layout_.micro_batches,
                " micro-batch(es) of ", config_.batch.micro_batch_size, " per iteration, ",
                config_.precision, " on ", device_.str()));
  log::info(str("model: ", m.num_layers, " layers, hidden ", m.hidden_size, ", ",
                m.num_attention_heads, " heads, ffn ", m.ffn(), ", seq ", m.seq_length, ", vocab ",
                m.vocab_size, " padded to ", vocab_, " (multiple of ",
                m.make_vocab_size_divisible_by, " x TP ", layout_.tp_size, "): ",
                si_units(double(gpt_parameter_count(m, vocab_))), " parameters"));
  const IterationFlops flops =
      iteration_flops(m, vocab_, config_.batch.global_batch_size, config_.recompute);
  log::info(str("FLOPs per iteration: ", si_units(flops.model), " (model), ",
                si_units(flops.six_pd), " (6PD); peak per device: ",
                peak_tflops_ > 0 ? si_units(peak_tflops_) + " TFLOP/s" : std::string("unknown, no MFU")));
  log::info(str("data: ", data_->stream->describe(), "; ", data_->train->size(), " train / ",
                data_->valid ? data_->valid->size() : 0, " validation samples"));
}

void Trainer::log_memory() const {
  // States counted from the tensors this rank holds, next to the planner's estimate of the
  // same; on CUDA the allocator's peak over the first iteration gives the activations (with
  // temporaries) as what it held beyond the states.
  const StateMemory held = optimizer_->memory();
  const MemoryEstimate estimate =
      estimate_memory(config_.model, vocab_, layout_, config_.precision);
  const auto mib = binary_bytes;
  std::string activations = str("not measured on ", device_.str());
  if (const auto stats = allocator_stats(device_)) {
    const double states = double(held.weights + held.grads + held.optimizer);
    activations = str(mib(double(stats->peak_allocated) - states), " beyond the states at the peak of ",
                      mib(double(stats->peak_allocated)), " allocated, ", mib(double(stats->reserved)),
                      " reserved");
  }
  log::info(str("memory on rank 0, measured (estimate): weights ", mib(double(held.weights)), " (",
                mib(estimate.weights), "), grads ", mib(double(held.grads)), " (",
                mib(estimate.grads), "), optimizer ", mib(double(held.optimizer)), " (",
                mib(estimate.optimizer), "), activations ", activations, " (",
                mib(estimate.activations), ")"));
}

void Trainer::log_iteration(const IterationMetrics& m) const {
  char line[512];
  std::snprintf(line, sizeof line,
                "iter %lld/%lld | samples %lld | %.1f ms | %.0f tok/s | lr %.3e | loss %.4f | "
                "grad_norm %.3f | TFLOPS/device 6PD %.3f megatron %.3f",
                static_cast<long long>(m.iteration), static_cast<long long>(config_.train.iters),
                static_cast<long long>(m.consumed_samples), m.elapsed_ms, m.tokens_per_second,
                m.learning_rate, m.loss, m.grad_norm, m.tflops_6pd, m.tflops_model);
  std::string text = line;
  if (config_.recompute != Recompute::none) {
    std::snprintf(line, sizeof line, " (hardware %.3f)", m.tflops_hardware);
    text += line;
  }
  if (!std::isnan(m.mfu)) text += str(" | MFU ", std::round(m.mfu * 1000) / 10, "%");
  if (config_.precision == Precision::fp16)
    text += str(" | loss_scale ", m.loss_scale, " | skipped ", m.skipped_total);
  if (!std::isnan(m.valid_loss)) text += str(" | valid_loss ", m.valid_loss);
  log::info(text);
}

void Trainer::write_metrics(std::ofstream& file, const IterationMetrics& m) const {
  JsonLine json;
  json.add("iteration", m.iteration)
      .add("consumed_samples", m.consumed_samples)
      .add("loss", m.loss)
      .add("lr", m.learning_rate)
      .add("grad_norm", m.grad_norm)
      .add("loss_scale", m.loss_scale)
      .add("skipped", int64_t(m.skipped))
      .add("elapsed_ms", m.elapsed_ms)
      .add("tokens_per_s", m.tokens_per_second)
      .add("tflops_6pd", m.tflops_6pd)
      .add("tflops_model", m.tflops_model)
      .add("tflops_hardware", m.tflops_hardware);
  if (!std::isnan(m.mfu)) json.add("mfu", m.mfu);
  if (!std::isnan(m.valid_loss)) json.add("valid_loss", m.valid_loss);
  if (layout_.pp_size > 1)
    json.add("max_in_flight", m.max_in_flight).add("pipeline_transfer_ms", m.pipeline_transfer_ms);
  errno = 0;
  file << json.str() << "\n" << std::flush;
  if (file) return;
  // Training goes on (a full disk stops the next checkpoint anyway); the file says no more.
  log::warn(str("train.metrics_file '", config_.train.metrics_file, "' cannot be written (",
                errno ? std::strerror(errno) : "write failed", "): iteration ", m.iteration,
                " and later are missing from it"));
  file.close();
}

void Trainer::train() {
  const auto& t = config_.train;
  log_start();
  if (iteration_ >= t.iters) {
    log::info(str("already at iteration ", iteration_, ", train.iters=", t.iters, ": nothing to do"));
    return;
  }
  std::ofstream metrics;
  if (!t.metrics_file.empty() && log::primary()) {
    // A resumed run continues the file; a fresh one starts it anew.
    const auto parent = std::filesystem::path(t.metrics_file).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    metrics.open(t.metrics_file, iteration_ > 0 ? std::ios::app : std::ios::trunc);
    if (!metrics) fail("train.metrics_file '", t.metrics_file, "' cannot be written: ", std::strerror(errno));
  }
  const int64_t first_iteration = iteration_;
  reset_peak_memory(device_);
  // Iterations queue up on the device; their numbers are read (one synchronisation) when one
  // of them is logged, validated or checkpointed.
  std::vector<PendingStep> pending;
  while (iteration_ < t.iters) {
    pending.push_back(run_step());
    const int64_t it = iteration_;
    const bool validate = t.eval_interval > 0 && (it % t.eval_interval == 0 || it == t.iters);
    const bool save = checkpoints_ && t.save_interval > 0 && it % t.save_interval == 0;
    const bool logged = it % t.log_interval == 0 || it == t.iters || it == first_iteration + 1;
    if (!(validate || save || logged)) continue;
    for (auto& step : pending) {
      IterationMetrics m = complete(step);
      if (m.iteration == first_iteration + 1) log_memory();
      if (m.iteration == it && validate) m.valid_loss = evaluate();
      if (m.iteration % t.log_interval == 0 || m.iteration == t.iters || !std::isnan(m.valid_loss))
        log_iteration(m);
      if (metrics.is_open()) write_metrics(metrics, m);
      for (const auto& callback : callbacks_) callback(m);
    }
    pending.clear();
    if (save) save_checkpoint();
  }
  if (checkpoints_ && last_saved_ != iteration_) save_checkpoint();
}

}  // namespace trident
