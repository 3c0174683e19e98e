#include "optim/zero.h"

#include <torch/cuda.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace trident {
namespace {
int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * int64_t(t.element_size()) : 0;
}

// Neighbouring segments of one bucket that touch and agree on key(parameter), merged.
struct Run {
  size_t bucket;
  int64_t offset, length;  // in the rank's slice of the bucket
  bool key;
};
template <typename Key>
std::vector<Run> merge_runs(const std::vector<FlatBuckets::Segment>& segments, Key key) {
  std::vector<Run> runs;
  for (const auto& s : segments) {
    const bool k = key(s.param);
    Run* last = runs.empty() ? nullptr : &runs.back();
    if (last && last->bucket == s.bucket && last->key == k && last->offset + last->length == s.slice_offset)
      last->length += s.numel;
    else
      runs.push_back({s.bucket, s.slice_offset, s.numel, k});
  }
  return runs;
}

std::vector<torch::Tensor> tensors_of(const std::vector<RoledParameter>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.tensor);
  return out;
}

// Which parameters may share a bucket: at stage 3 those of one unit; the tied embedding always
// alone (make_flat_buckets).
std::vector<int64_t> bucket_groups(const std::vector<RoledParameter>& params, const ZeroSharding& zero,
                                   const std::vector<int64_t>& units) {
  constexpr int64_t kTied = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> groups;
  for (size_t i = 0; i < params.size(); ++i)
    groups.push_back(params[i].role.tied != Tied::no ? kTied : zero.shards_weights() ? units[i] : 0);
  return groups;
}

FlatBuckets make_buckets(const std::vector<torch::Tensor>& params, const std::vector<RoledParameter>& roled,
                         const ZeroOptions& options, const ZeroSharding& zero) {
  TRIDENT_CHECK(zero.stage >= 0 && zero.stage <= 3, "ZeRO stage ", zero.stage);
  if (zero.shards_weights())
    TRIDENT_CHECK(options.units.size() == params.size(), "ZeRO-3 needs the unit of each of the ", params.size(),
                  " parameters, got ", options.units.size());
  const int64_t bytes = zero.shards_weights() ? std::numeric_limits<int64_t>::max() : options.bucket_bytes;
  return make_grad_buckets(params, bytes, options.main_dtype, zero, bucket_groups(roled, zero, options.units));
}

std::shared_ptr<FlatParameters> make_weights(const std::vector<torch::Tensor>& params, const FlatBuckets& flat,
                                             Communicator& group, const ZeroSharding& zero,
                                             const std::vector<int64_t>& units) {
  if (zero.shards_weights()) return std::make_shared<ShardedParameters>(params, flat, units, group);
  return std::make_shared<ReplicatedParameters>(params, flat, group);
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(const std::vector<RoledParameter>& params, Communicator& dp_group,
                             const OptimizerConfig& config, ZeroOptions options)
    : group_(dp_group),
      zero_{options.stage, dp_group.size()},
      config_(config),
      params_(tensors_of(params)),
      flat_(make_buckets(params_, params, options, zero_)),
      weights_(make_weights(params_, flat_, dp_group, zero_, options.units)),
      grads_(params_, flat_, dp_group, GradBufferOptions{options.main_dtype, zero_, options.fuse_weight_grads}),
      rank_(sharded() ? group_.rank() : 0) {
  // Step 4 of the header's order: main weights and moments for this rank's shard, in host
  // memory with offload.
  torch::NoGradGuard no_grad;
  const torch::TensorOptions weight_options = weights_->options();
  auto main_options = weight_options.dtype(options.main_dtype);
  if (options.offload) main_options = main_options.device(torch::kCPU).pinned_memory(weight_options.device().is_cuda());
  if (options.offload || options.main_dtype != weight_options.dtype())
    main_ = torch::empty({flat_.shard_numel()}, main_options);
  exp_avg_ = torch::zeros({flat_.shard_numel()}, main_options);
  exp_avg_sq_ = torch::zeros({flat_.shard_numel()}, main_options);
  if (options.offload) host_grads_ = torch::empty({flat_.shard_numel()}, main_options);
  for (size_t b = 0; b < flat_.buckets.size(); ++b) {
    const int64_t start = flat_.buckets[b].shard_start, length = flat_.slice_numel(b);
    auto own = weights_->slice(b);
    AdamWSlice slice;
    slice.param = own;
    if (main_.defined()) {
      slice.param = main_.narrow(0, start, length);
      slice.param.copy_(own);
    }
    slice.grad = options.offload ? host_grads_.narrow(0, start, length) : grads_.reduced(b);
    slice.exp_avg = exp_avg_.narrow(0, start, length);
    slice.exp_avg_sq = exp_avg_sq_.narrow(0, start, length);
    slices_.push_back(std::move(slice));
  }
  segments_ = flat_.segments(rank_);
  // Matrices and embeddings decay; biases and LayerNorm parameters do not (their roles say so).
  for (const Run& run : merge_runs(segments_, [&](size_t p) { return params[p].role.decay; }))
    slices_[run.bucket].runs.push_back({run.offset, run.length, run.key});
}

std::vector<torch::Tensor> ZeroOptimizer::grad_pieces(const std::vector<bool>& which) const {
  std::vector<torch::Tensor> pieces;
  for (const auto& s : segments_)
    if (which[s.param]) pieces.push_back(grads_.reduced(s.bucket).narrow(0, s.slice_offset, s.numel));
  return pieces;
}

torch::Tensor ZeroOptimizer::grad_square_sum(const std::vector<bool>& counted) const {
  // Norms of whole runs of counted parameters, each computed in fp64 (an fp32 accumulation over
  // millions of elements is off by 1e-5 to 1e-4, and the norm decides the clipping): at most a
  // bucket's fp64 copy at a time, and inf or nan anywhere makes the sum inf or nan (the loss
  // scaler's signal).
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, weights_->options().dtype(torch::kDouble));
  for (const Run& run : merge_runs(segments_, [&](size_t p) { return bool(counted[p]); })) {
    if (!run.key) continue;
    const auto grads = grads_.reduced(run.bucket).narrow(0, run.offset, run.length);
    auto norm = at::linalg_vector_norm(grads, 2, c10::nullopt, false, torch::kDouble);
    total += norm * norm;
  }
  return total;
}

void ZeroOptimizer::scale_grads(const torch::Tensor& factor) {
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < flat_.buckets.size(); ++b) grads_.reduced(b).mul_(factor);
}

void ZeroOptimizer::step(double lr) {
  ++step_;
  if (host_grads_.defined()) {  // offload: the reduced gradients go to the host, bucket by bucket
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < flat_.buckets.size(); ++b) slices_[b].grad.copy_(grads_.reduced(b), /*non_blocking=*/true);
    if (weights_->options().device().is_cuda()) torch::cuda::synchronize();
  }
  adamw_update(slices_, config_, lr, step_);
  publish();
}

void ZeroOptimizer::publish() {
  torch::NoGradGuard no_grad;
  if (main_.defined())
    for (size_t b = 0; b < flat_.buckets.size(); ++b) weights_->slice(b).copy_(slices_[b].param);
  weights_->publish();
}

StateMemory ZeroOptimizer::memory() const {
  const int64_t optimizer = bytes_of(main_) + bytes_of(exp_avg_) + bytes_of(exp_avg_sq_);
  StateMemory memory{weights_->bytes(), grads_.bytes(), optimizer, 0, 0};
  if (host_grads_.defined()) {  // offload: the optimizer's states are on the host
    memory.optimizer = 0;
    memory.host = optimizer + bytes_of(host_grads_);
  }
  if (auto sharded = sharded_weights()) memory.gathered = sharded->peak_gathered_bytes();
  return memory;
}

std::vector<ZeroOptimizer::StatePiece> ZeroOptimizer::state_pieces() const {
  std::vector<StatePiece> pieces;
  for (const auto& s : segments_) {
    const auto& slice = slices_[s.bucket];
    auto view = [&](const torch::Tensor& t) { return t.narrow(0, s.slice_offset, s.numel); };
    pieces.push_back({s.param, s.param_offset, s.numel, view(weights_->slice(s.bucket)), view(slice.param),
                      view(slice.exp_avg), view(slice.exp_avg_sq)});
  }
  return pieces;
}

void ZeroOptimizer::restore_steps(int64_t steps) {
  TRIDENT_CHECK(steps >= 0, "a negative step count ", steps);
  step_ = steps;
}

}  // namespace trident
