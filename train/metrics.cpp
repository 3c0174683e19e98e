#include "train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/json_line.h"
#include "core/logging.h"
#include "core/plan/flops.h"
#include "core/plan/memory.h"
#include "core/plan/time_model.h"
#include "core/report/run_record.h"
#include "core/text.h"
#include "optim/zero.h"
#include "train/device.h"
#include "train/tensorboard_writer.h"

namespace trident {

RunLog::RunLog(const Config& config, const Layout& layout, int64_t vocab, double peak_tflops)
    : config_(config),
      layout_(layout),
      vocab_(vocab),
      peak_tflops_(peak_tflops),
      flops_(iteration_flops(config.model, vocab, config.batch.global_batch_size, config.recompute)) {}

RunLog::~RunLog() = default;

void RunLog::add_rates(IterationMetrics& m) const {
  const double seconds = m.elapsed_ms / 1e3;
  m.tokens_per_second = double(config_.batch.global_batch_size * config_.model.seq_length) / seconds;
  const double per_device = 1e12 * seconds * double(layout_.world_size());
  m.tflops_6pd = flops_.six_pd / per_device;
  m.tflops_model = flops_.model / per_device;
  m.tflops_hardware = flops_.hardware / per_device;
  if (peak_tflops_ > 0) m.mfu = m.tflops_model / peak_tflops_;
}

void RunLog::expect_throughput(double tokens_per_s, double tflops, std::string device) {
  expected_tokens_per_s_ = tokens_per_s;
  expected_tflops_ = tflops;
  device_ = std::move(device);
}

void RunLog::start(const std::string& backend, const torch::Device& device, int64_t parameters,
                   const std::string& data) const {
  const auto& m = config_.model;
  log::info(str("trident: ", layout_.world_size(), " process(es) (", backend, "), ", describe_axes(layout_),
                ", ", layout_.micro_batches,
                " micro-batch(es) of ", layout_.micro_batch, " per iteration, ", config_.precision,
                " on ", device.str()));
  const std::string ffn = m.moe_layers() < m.num_layers ? str(", ffn ", m.ffn()) : "";  // a dense layer's
  log::info(str("model: ", m.num_layers, " layers, hidden ", m.hidden_size, ", ", m.num_attention_heads, " heads",
                ffn, ", seq ", m.seq_length, ", vocab ", m.vocab_size, " padded to ",
                vocab_, " (multiple of ", m.make_vocab_size_divisible_by, " x TP ", layout_.tp_size,
                "): ", si_units(double(parameters)), " parameters", moe_summary(m, vocab_)));
  log::info(str("FLOPs per iteration: ", si_units(flops_.model), " (model), ", si_units(flops_.six_pd),
                " (6PD); peak per device: ",
                peak_tflops_ > 0 ? si_units(peak_tflops_) + " TFLOP/s"
                                 : std::string("unknown, no MFU (set train.peak_tflops)")));
  if (expected_tflops_ > 0) log::info(throughput_expectation(expected_tokens_per_s_, expected_tflops_, device_));
  log::info("data: " + data);
}

void RunLog::memory(const StateMemory& held, const torch::Device& device) const {
  const MemoryEstimate estimate =
      estimate_memory(config_.model, vocab_, layout_, config_.precision, build_software(device));
  const auto mib = binary_bytes;
  std::string activations = str("not measured on ", device.str());
  if (const auto stats = allocator_stats(device)) {
    const double states = double(held.weights + held.gathered + held.grads + held.optimizer);
    activations = str(mib(double(stats->peak_allocated) - states), " beyond the states at the peak of ",
                      mib(double(stats->peak_allocated)), " allocated, ", mib(double(stats->reserved)),
                      " reserved");
  }
  const std::string host =
      layout_.offload ? str(", offloaded to host memory ", mib(double(held.host)), " (", mib(estimate.host), ")") : "";
  const std::string gathered = layout_.zero().shards_weights() ? str(" + at most ", mib(double(held.gathered)), " (",
                                                              mib(estimate.gathered), ") gathered")
                                                        : "";
  log::info(str("memory on rank 0, measured (estimate): weights ", mib(double(held.weights)), " (",
                mib(estimate.weights), ")", gathered, ", grads ", mib(double(held.grads)), " (", mib(estimate.grads),
                "), optimizer ", mib(double(held.optimizer)), " (", mib(estimate.optimizer), ")", host,
                ", activations ", activations, " (", mib(estimate.activations), ")"));
}

void check_scalar_names(const IterationMetrics& m) {
  static const std::set<std::string> kUsed = {"iteration",   "consumed_samples", "loss",          "lr",
                                              "grad_norm",   "loss_scale",       "skipped",       "elapsed_ms",
                                              "tokens_per_s", "tflops_6pd",      "tflops_model",  "tflops_hardware",
                                              "mfu",         "valid_loss",       "max_in_flight", "pipeline_transfer_ms"};
  // The families of names RunLog::values makes: "<prefix><name>".
  static const char* const kPrefixes[] = {"valid_loss/", "aux/", "moe/", "straggler/", "memory/"};
  std::set<std::string> seen;
  for (const auto& [name, value] : m.scalars) {
    const bool in_a_family =
        std::any_of(std::begin(kPrefixes), std::end(kPrefixes), [&](const char* p) { return name.rfind(p, 0) == 0; });
    if (name.empty() || kUsed.count(name) || in_a_family)
      fail("IterationMetrics::scalars: '", name, "' is not a name of its own (empty, or one the metrics file uses)");
    if (!seen.insert(name).second) fail("IterationMetrics::scalars: '", name, "' is given twice");
  }
}

void RunLog::iteration(const IterationMetrics& m) const {
  if (++logged_ >= 3 && !warned_) {
    const std::string warning = throughput_warning(m.tflops_model, expected_tflops_, device_);
    if (!warning.empty()) log::warn(warning), warned_ = true;
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "iter %lld/%lld | samples %lld | %.1f ms | %.0f tok/s | lr %.3e | loss %.4f | "
                "grad_norm %.3f | TFLOPS/device 6PD %.3f megatron %.3f",
                static_cast<long long>(m.iteration), static_cast<long long>(config_.train.iters),
                static_cast<long long>(m.consumed_samples), m.elapsed_ms, m.tokens_per_second,
                m.learning_rate, m.loss, m.grad_norm, m.tflops_6pd, m.tflops_model);
  std::string text = line;
  for (const auto& [name, value] : m.auxiliary_losses) text += str(" | aux/", name, " ", value);
  for (const auto& [name, value] : m.expert_balance) text += str(" | moe/", name, " ", value);
  if (config_.recompute != Recompute::none) {
    std::snprintf(line, sizeof line, " (hardware %.3f)", m.tflops_hardware);
    text += line;
  }
  if (!std::isnan(m.mfu)) text += str(" | MFU ", std::round(m.mfu * 1000) / 10, "%");
  if (config_.precision == Precision::fp16)
    text += str(" | loss_scale ", m.loss_scale, " | skipped ", m.skipped_total);
  if (!std::isnan(m.valid_loss)) text += str(" | valid_loss ", m.valid_loss);
  for (size_t d = 0; d < m.valid_losses.size(); ++d)
    text += str(d == 0 ? " (" : ", ", m.valid_losses[d].first, " ", m.valid_losses[d].second,
                d + 1 == m.valid_losses.size() ? ")" : "");
  for (const auto& [name, value] : m.scalars) text += str(" | ", name, " ", value);
  log::info(text);
}

void RunLog::open_metrics(int64_t resumed_at, const std::string& backend, const torch::Device& device,
                          int64_t parameters) {
  if (!log::primary()) return;
  const std::string& path = config_.train.metrics_file;
  if (!path.empty()) {
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    metrics_.open(path, resumed_at > 0 ? std::ios::app : std::ios::trunc);
    if (!metrics_) fail("train.metrics_file '", path, "' cannot be written: ", std::strerror(errno));
    const BuildInfo build = build_info();
    write_run_record(run_record_path(path), {config_.to_yaml(), layout_.world_size(), device_name(device), backend,
                                             build.torch_version, build.trident_version, parameters, log::utc_now()});
  }
  if (!config_.train.tensorboard_dir.empty())
    tensorboard_ = std::make_unique<TensorBoardWriter>(config_.train.tensorboard_dir, resumed_at);
}

std::vector<RunLog::Value> RunLog::values(const IterationMetrics& m) const {
  std::vector<Value> out = {{"iteration", double(m.iteration), true},
                            {"consumed_samples", double(m.consumed_samples), true},
                            {"loss", m.loss, false}};
  for (const auto& [name, value] : m.auxiliary_losses) out.push_back({"aux/" + name, value, false});
  for (const auto& [name, value] : m.expert_balance) out.push_back({"moe/" + name, value, false});
  out.insert(out.end(), {{"lr", m.learning_rate, false},
                         {"grad_norm", m.grad_norm, false},
                         {"loss_scale", m.loss_scale, false},
                         {"skipped", double(m.skipped), true},
                         {"elapsed_ms", m.elapsed_ms, false},
                         {"tokens_per_s", m.tokens_per_second, false},
                         {"tflops_6pd", m.tflops_6pd, false},
                         {"tflops_model", m.tflops_model, false},
                         {"tflops_hardware", m.tflops_hardware, false}});
  if (!std::isnan(m.mfu)) out.push_back({"mfu", m.mfu, false});
  if (!std::isnan(m.valid_loss)) out.push_back({"valid_loss", m.valid_loss, false});
  for (const auto& [dataset, loss] : m.valid_losses) out.push_back({"valid_loss/" + dataset, loss, false});
  if (m.stragglers) {
    const StragglerFigures& f = *m.stragglers;
    out.insert(out.end(), {{"straggler/slowest_rank", double(f.slowest_rank), true},
                           {"straggler/slowest_compute_s", f.slowest_compute_s, false},
                           {"straggler/fastest_rank", double(f.fastest_rank), true},
                           {"straggler/fastest_compute_s", f.fastest_compute_s, false},
                           {"straggler/wait_min_s", f.wait_min_s, false},
                           {"straggler/wait_median_s", f.wait_median_s, false},
                           {"straggler/wait_max_s", f.wait_max_s, false}});
  }
  if (m.memory) {
    const double gib = double(1 << 30);
    out.insert(out.end(), {{"memory/peak_allocated_gib", double(m.memory->peak_allocated) / gib, false},
                           {"memory/reserved_gib", double(m.memory->reserved) / gib, false}});
  }
  for (const auto& [name, value] : m.scalars) out.push_back({name, value, false});
  if (layout_.pp_size > 1)
    out.insert(out.end(), {{"max_in_flight", double(m.max_in_flight), true},
                           {"pipeline_transfer_ms", m.pipeline_transfer_ms, false}});
  return out;
}

void RunLog::record(const IterationMetrics& m) {
  if (!metrics_.is_open() && !tensorboard_) return;
  const std::vector<Value> named = values(m);
  if (tensorboard_) {
    std::vector<std::pair<std::string, double>> scalars;
    for (const Value& v : named)
      if (v.name != "iteration") scalars.emplace_back(v.name, v.value);  // the event's step
    if (!tensorboard_->write(m.iteration, scalars)) {
      log::warn(str("train.tensorboard_dir: ", tensorboard_->path(), " cannot be written (",
                    errno ? std::strerror(errno) : "write failed", "): iteration ", m.iteration,
                    " and later are missing from it"));
      tensorboard_.reset();
    }
  }
  if (!metrics_.is_open()) return;
  JsonLine json;
  for (const Value& v : named) v.integer ? json.add(v.name, int64_t(v.value)) : json.add(v.name, v.value);
  errno = 0;
  metrics_ << json.str() << "\n" << std::flush;
  if (metrics_) return;
  // Training goes on (a full disk stops the next checkpoint anyway); the file says no more.
  log::warn(str("train.metrics_file '", config_.train.metrics_file, "' cannot be written (",
                errno ? std::strerror(errno) : "write failed", "): iteration ", m.iteration,
                " and later are missing from it"));
  metrics_.close();
}

}  // namespace trident
