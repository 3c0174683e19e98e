#include "train/trainer.h"

#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/flops.h"
#include "core/json_line.h"
#include "core/logging.h"
#include "core/memory.h"
#include "core/plan.h"
#include "core/text.h"
#include "core/timer.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/process_groups.h"
#include "train/checkpoint.h"
#include "train/data.h"

namespace trident {
namespace {

torch::Dtype parameter_dtype(const std::string& precision) {
  if (precision == "fp64") return torch::kDouble;
  if (precision == "fp32") return torch::kFloat;
  fail("precision=", precision, " is not available yet: this build trains in fp32 or fp64");
}

torch::Device training_device(const std::string& device, const LaunchInfo& launch) {
  if (device == "cpu") return torch::kCPU;
  if (!torch::cuda::is_available())
    fail("train.device=cuda, but this LibTorch has no CUDA or sees no GPU; use train.device=cpu");
  return torch::Device(torch::kCUDA, int(launch.local_rank % torch::cuda::device_count()));
}

// Keys the config accepts (the planner and --dry-run use them) that training cannot honour yet.
void check_trainable(const Config& config) {
  if (config.parallel.zero_stage > 0)
    fail("parallel.zero_stage=", config.parallel.zero_stage,
         " is not available yet: this build trains with a replicated optimizer (zero_stage=0)");
}

}  // namespace

Trainer::Trainer(Config config, const LaunchInfo& launch)
    : config_(std::move(config)),
      layout_(resolve_layout(config_, launch.world_size)),
      device_(training_device(config_.train.device, launch)),
      dtype_(parameter_dtype(config_.precision)),
      vocab_(config_.model.padded_vocab(config_.parallel.tensor)) {
  log::set_primary(launch.rank == 0);
  check_trainable(config_);
  CommOptions comm;
  comm.backend = config_.parallel.backend;
  comm.timeout = std::chrono::seconds(config_.parallel.timeout_s);
  comm.device = device_;
  groups_ = std::make_unique<ProcessGroups>(make_world_communicator(launch, comm), layout_);
  if (config_.train.threads > 0) torch::set_num_threads(int(config_.train.threads));
  peak_tflops_ = config_.train.peak_tflops;

  data_ = std::make_unique<GPTData>(config_);

  TrainingProgress progress;
  const std::string resume_from = find_resume_point(progress);
  build_model_chunks();
  grads_ = std::make_unique<DataParallelGrads>(
      params_, groups_->data(), int64_t(config_.parallel.bucket_mb * (1 << 20)));
  optimizer_ = make_adamw(params_, config_.optimizer);

  if (!resume_from.empty()) {
    read_checkpoint(resume_from, groups_->coordinates().tp, groups_->coordinates().pp, chunks_,
                    *optimizer_);
    iteration_ = last_saved_ = progress.iteration;
    consumed_samples_ = progress.consumed_samples;
    log::info(str("resumed from ", resume_from, " at iteration ", iteration_, " (",
                  consumed_samples_, " samples consumed)"));
  }
}

Trainer::~Trainer() = default;

std::string Trainer::find_resume_point(TrainingProgress& progress) {
  if (config_.train.checkpoint_dir.empty()) return "";
  checkpoints_ = std::make_unique<CheckpointStore>(config_.train.checkpoint_dir);
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
  const int64_t p = layout_.pipeline, v = config_.parallel.virtual_stages;
  const int64_t layers = config_.model.num_layers / (p * v);
  for (int64_t c = 0; c < v; ++c) {
    const int64_t virtual_stage = c * p + groups_->coordinates().pp;
    GPT chunk(config_.model, vocab_,
              TensorParallel{groups_->tensor_group(), config_.parallel.sequence_parallel},
              Stage{virtual_stage * layers, layers, virtual_stage == 0, virtual_stage == p * v - 1},
              parse_recompute(config_.recompute));
    chunk->to(dtype_);
    chunk->initialize(config_.train.seed);
    chunk->to(device_);
    for (const auto& item : chunk->named_parameters()) {
      params_.push_back(item.value());
      // The last stage's copy of the tied embedding: synchronised with the first stage's, and
      // left out of the gradient norm, which counts the first stage's.
      if (p > 1 && item.key() == "wte.weight") {
        tied_embedding_ = item.value();
        if (!chunk->stage().embedding) continue;
      }
      auto& kind = GPTImpl::partition_dim(item.key()) < 0 ? replicated_params_ : sharded_params_;
      kind.push_back(item.value());
    }
    for (const auto& param : chunk->sequence_parallel_parameters())
      sequence_parallel_params_.push_back(param);
    chunks_.push_back(chunk);
  }
}

void Trainer::on_iteration(std::function<void(const IterationMetrics&)> callback) {
  callbacks_.push_back(std::move(callback));
}

IterationMetrics Trainer::step() {
  Stopwatch stopwatch;
  for (auto& chunk : chunks_) chunk->train();
  const auto& batch = config_.batch;
  const double lr = learning_rate(config_.optimizer, iteration_ + 1, config_.train.iters);
  set_learning_rate(*optimizer_, lr);
  grads_->zero();

  // Each micro-batch's mean loss is scaled by 1/M so the gradients add up to the mean over
  // this rank's share; the data-parallel average then makes it the global-batch mean.
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  const PipelineStats stats = run_pipeline(
      groups_->pipeline(), pipeline_options(),
      [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
        return stage_forward(*data_->train, consumed_samples_, chunk, micro, input, loss_sum);
      },
      [&] { grads_->arm(); });
  grads_->finish();
  reduce_sequence_parallel_grads();
  if (tied_embedding_.defined()) groups_->embedding().all_reduce(tied_embedding_.mutable_grad(), ReduceOp::sum);
  // The loss lives on the last stage; the sum over the pipeline brings it to every rank.
  groups_->pipeline().all_reduce(loss_sum, ReduceOp::sum);
  groups_->data().all_reduce(loss_sum, ReduceOp::avg);
  const double grad_norm = std::sqrt(global_grad_square_sum());
  clip_grads(params_, grad_norm, config_.optimizer.clip_grad);
  optimizer_->step();

  ++iteration_;
  consumed_samples_ += batch.global_batch_size;

  IterationMetrics m;
  m.loss = loss_sum.item<double>();  // the one host synchronisation of the step
  m.elapsed_ms = stopwatch.elapsed_ms();
  m.iteration = iteration_;
  m.consumed_samples = consumed_samples_;
  m.learning_rate = lr;
  m.grad_norm = grad_norm;
  m.max_in_flight = stats.max_in_flight;
  m.pipeline_transfer_ms = stats.transfer_ms;
  const double seconds = m.elapsed_ms / 1e3;
  m.tokens_per_second = double(batch.global_batch_size * config_.model.seq_length) / seconds;
  const IterationFlops flops =
      iteration_flops(config_.model, vocab_, batch.global_batch_size, config_.recompute);
  const double per_device = 1e12 * seconds * double(layout_.world_size);
  m.tflops_6pd = flops.six_pd / per_device;
  m.tflops_model = flops.model / per_device;
  m.tflops_hardware = flops.hardware / per_device;
  if (peak_tflops_ > 0) m.mfu = m.tflops_model / peak_tflops_;
  return m;
}

double Trainer::evaluate() {
  if (!data_->valid) fail("evaluate() needs validation data: set data.valid_fraction > 0");
  torch::NoGradGuard no_grad;
  for (auto& chunk : chunks_) chunk->eval();
  const auto& batch = config_.batch;
  auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  for (int64_t i = 0; i < config_.train.eval_iters; ++i)
    run_pipeline_forward(groups_->pipeline(), pipeline_options(),
                         [&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
                           return stage_forward(*data_->valid, i * batch.global_batch_size, chunk,
                                                micro, input, total);
                         });
  groups_->pipeline().all_reduce(total, ReduceOp::sum);
  groups_->data().all_reduce(total, ReduceOp::avg);
  return total.item<double>() / double(config_.train.eval_iters);
}

PipelineOptions Trainer::pipeline_options() const {
  PipelineOptions options;
  options.schedule = config_.parallel.schedule;
  options.micro_batches = layout_.micro_batches;
  options.virtual_stages = config_.parallel.virtual_stages;
  const int64_t seq = config_.model.seq_length / (config_.parallel.sequence_parallel ? layout_.tensor : 1);
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
    batch = samples.batch(sample_position(consumed, micro, size, groups_->coordinates().dp, layout_.data), size);
  const torch::Tensor x = first ? batch.tokens.to(device_) : input;
  if (!last) return model->forward(x);
  auto loss = model->loss(x, batch.targets.to(device_)) / double(layout_.micro_batches);
  loss_sum += loss.detach().to(torch::kDouble);
  return loss;
}

void Trainer::reduce_sequence_parallel_grads() {
  if (sequence_parallel_params_.empty()) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : sequence_parallel_params_) grads.push_back(p.grad().view(-1));
  auto flat = torch::cat(grads);  // one all-reduce for all of them
  groups_->tensor().all_reduce(flat, ReduceOp::sum);
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat.narrow(0, offset, g.numel()));
    offset += g.numel();
  }
}

double Trainer::global_grad_square_sum() {
  // Shards are summed over the model-parallel group (TP x PP); replicated parameters count
  // once per stage (from TP rank 0), the tied embedding once (from the first stage).
  // Data-parallel replicas hold equal gradients after the all-reduce: no DP sum.
  auto total = grad_square_sum(sharded_params_);
  if (groups_->coordinates().tp == 0) total = total + grad_square_sum(replicated_params_);
  total = total.reshape({1}).contiguous();
  groups_->model().all_reduce(total, ReduceOp::sum);
  return total.item<double>();
}

void Trainer::save_checkpoint() {
  if (!checkpoints_) fail("save_checkpoint() needs train.checkpoint_dir");
  // World rank 0 prepares and publishes; the first data-parallel replica writes one shard per
  // (TP rank, stage, chunk); every step ends with all ranks agreeing that nobody failed.
  Communicator& world = groups_->world();
  const bool leader = world.rank() == 0;
  const bool writer = groups_->coordinates().dp == 0;
  std::string failure;
  auto step = [&](bool mine, const std::function<void()>& body) {
    auto failed = torch::zeros({1}, torch::kInt);
    if (mine) {
      try {
        body();
      } catch (const std::exception& e) {
        failure = e.what();
        failed.fill_(1);
      }
    }
    world.all_reduce(failed, ReduceOp::max);
    if (!failure.empty()) fail(failure);
    if (failed.item<int>() != 0)
      fail("another rank could not save checkpoint ", checkpoints_->path(iteration_));
  };
  step(leader, [&] { checkpoints_->begin(iteration_); });
  step(writer, [&] {
    const std::string folder = checkpoints_->staging_path(iteration_);
    write_shard(folder, groups_->coordinates().tp, groups_->coordinates().pp, chunks_, *optimizer_);
    if (leader) write_shared_state(folder, {iteration_, consumed_samples_}, config_);
  });
  step(leader, [&] { checkpoints_->commit(iteration_, config_.train.keep_checkpoints); });
  last_saved_ = iteration_;
  log::info(str("saved checkpoint ", checkpoints_->path(iteration_)));
}

void Trainer::log_start() const {
  const auto& m = config_.model;
  log::info(str("trident: ", layout_.world_size, " process(es) (", groups_->world().backend(),
                "), TP ", layout_.tensor, " x PP ",
                layout_.pipeline, " x DP ", layout_.data, ", ", layout_.micro_batches,
                " micro-batch(es) of ", config_.batch.micro_batch_size, " per iteration, ",
                config_.precision, " on ", device_.str()));
  log::info(str("model: ", m.num_layers, " layers, hidden ", m.hidden_size, ", ",
                m.num_attention_heads, " heads, ffn ", m.ffn(), ", seq ", m.seq_length, ", vocab ",
                m.vocab_size, " padded to ", vocab_, " (multiple of ",
                m.make_vocab_size_divisible_by, " x TP ", layout_.tensor, "): ",
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
  // Measured from the tensors this rank holds, next to the planner's estimate of the same.
  auto bytes = [](const torch::Tensor& t) { return double(t.numel()) * double(t.element_size()); };
  double weights = 0, optimizer = 0;
  for (const auto& p : params_) weights += bytes(p);
  for (const auto& item : optimizer_->state()) {
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(*item.second);
    for (const auto& t : {state.exp_avg(), state.exp_avg_sq(), state.max_exp_avg_sq()})
      if (t.defined()) optimizer += bytes(t);
  }
  const MemoryEstimate estimate =
      estimate_memory(config_.model, vocab_, layout_of(config_, layout_.data), config_.precision);
  const auto mib = binary_bytes;
  log::info(str("memory on rank 0, measured (estimate): weights ", mib(weights), " (",
                mib(estimate.weights), "), grads ", mib(bytes(grads_->buffer())), " (",
                mib(estimate.grads), "), optimizer ", mib(optimizer), " (", mib(estimate.optimizer),
                "), activations not measured on ", device_.str(), " (", mib(estimate.activations),
                ")"));
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
  if (config_.recompute != "none") {
    std::snprintf(line, sizeof line, " (hardware %.3f)", m.tflops_hardware);
    text += line;
  }
  if (!std::isnan(m.mfu)) text += str(" | MFU ", std::round(m.mfu * 1000) / 10, "%");
  if (!std::isnan(m.valid_loss)) text += str(" | valid_loss ", m.valid_loss);
  log::info(text);
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
    if (!metrics) fail("train.metrics_file '", t.metrics_file, "' cannot be written");
  }
  const int64_t first_iteration = iteration_;
  while (iteration_ < t.iters) {
    IterationMetrics m = step();
    if (m.iteration == first_iteration + 1) log_memory();
    if (t.eval_interval > 0 && (m.iteration % t.eval_interval == 0 || m.iteration == t.iters))
      m.valid_loss = evaluate();
    if (m.iteration % t.log_interval == 0 || m.iteration == t.iters || !std::isnan(m.valid_loss))
      log_iteration(m);
    if (metrics.is_open()) {
      JsonLine json;
      json.add("iteration", m.iteration)
          .add("consumed_samples", m.consumed_samples)
          .add("loss", m.loss)
          .add("lr", m.learning_rate)
          .add("grad_norm", m.grad_norm)
          .add("elapsed_ms", m.elapsed_ms)
          .add("tokens_per_s", m.tokens_per_second)
          .add("tflops_6pd", m.tflops_6pd)
          .add("tflops_model", m.tflops_model)
          .add("tflops_hardware", m.tflops_hardware);
      if (!std::isnan(m.mfu)) json.add("mfu", m.mfu);
      if (!std::isnan(m.valid_loss)) json.add("valid_loss", m.valid_loss);
      if (layout_.pipeline > 1)
        json.add("max_in_flight", m.max_in_flight).add("pipeline_transfer_ms", m.pipeline_transfer_ms);
      metrics << json.str() << "\n" << std::flush;
    }
    for (const auto& callback : callbacks_) callback(m);
    if (checkpoints_ && t.save_interval > 0 && m.iteration % t.save_interval == 0) save_checkpoint();
  }
  if (checkpoints_ && last_saved_ != iteration_) save_checkpoint();
}

}  // namespace trident
