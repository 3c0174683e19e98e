// The optimizer over the data-parallel group, ZeRO stages 0-3 (Rajbhandari et al. 2019) with
// mixed precision, in the layout of Megatron's distributed optimizer:
//  - the model's parameters become views of flat buckets laid out like the gradients
//    (parallel/flat_buckets.h), so a bucket of updated parameters is one all-gather;
//  - main parameters in `main_dtype` (fp32 for bf16/fp16 models; the parameters themselves
//    for fp32/fp64 models) and AdamW's moments are kept for this rank's shard only: 1/d of them
//    from stage 1 on, all of them at stage 0;
//  - gradients are sharded from stage 2 on (parallel/data_parallel.h), the weights at stage 3,
//    where a bucket is one unit of the model that forward and backward gather when they need it
//    (parallel/sharded_parameters.h);
//  - step() updates the shard and publishes it: all-gathered into every rank's weights at
//    stages 0-2, left in the shard for the next gathers at stage 3;
//  - with offload, the shard's main parameters and moments live in host memory.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "core/config.h"
#include "optim/adamw.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/flat_buckets.h"
#include "parallel/flat_parameters.h"
#include "parallel/parameter_role.h"
#include "parallel/sharded_parameters.h"

namespace trident {

struct ZeroOptions {
  int64_t stage = 0;  // parallel.zero_stage; over the data-parallel group given (ZeroSharding)
  int64_t bucket_bytes = 25 << 20;
  torch::Dtype main_dtype = torch::kFloat;
  // ZeRO-Offload (Ren et al. 2021): main weights and moments in host memory (pinned when the
  // model is on a GPU), this rank's reduced gradients copied there for AdamW on the CPU, the
  // updated weights copied back. On a CPU model the same path runs, host and device being one.
  bool offload = false;
  // 16-bit weights: their gradients added into the fp32 buffer by the linear layers' multiplies
  // (GradBufferOptions::fuse_weight_grads).
  bool fuse_weight_grads = true;
  // Stage 3: each parameter's unit (ParallelModel::units); a bucket holds one unit, whatever
  // bucket_bytes says.
  std::vector<int64_t> units;
};

struct StateMemory {
  int64_t weights = 0, grads = 0, optimizer = 0;  // bytes this rank holds on its device
  int64_t host = 0;                               // and in host memory (offload)
  int64_t gathered = 0;                           // ZeRO-3: the most gathered weights held at once
};

class ZeroOptimizer {
 public:
  // Takes over the model's parameters (model order, one dtype), in this order, here only:
  //  1. FlatBuckets places every parameter in buckets (reverse model order, padded to the ZeRO
  //     shards; the tied embedding alone, so that its shards line up on the first and last
  //     stage);
  //  2. FlatParameters moves the weights into the buckets: every parameter tensor becomes a view
  //     of its place, so the weights must be final (initialised or loaded from a checkpoint)
  //     before; at stage 3 only this rank's shard stays;
  //  3. DataParallelGrads points every .grad into the gradient buffer and hooks backward;
  //  4. main weights and AdamW moments are made for this rank's shard.
  // Roles decide weight decay. Holds views of its buffers: not copyable or movable.
  ZeroOptimizer(const std::vector<RoledParameter>& params, Communicator& dp_group,
                const OptimizerConfig& config, ZeroOptions options);
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  DataParallelGrads& grads() { return grads_; }
  // After grads().finish(): this rank's reduced gradients of the parameters marked in `which`,
  // as views (in an order that is the same on every rank holding the same parameters at the
  // same places), for reductions over other groups.
  std::vector<torch::Tensor> grad_pieces(const std::vector<bool>& which) const;
  // Sum of squares of this rank's reduced gradients of the parameters marked in `counted`
  // (an fp64 scalar on the gradients' device). Sharded stages sum over the data-parallel
  // group afterwards.
  torch::Tensor grad_square_sum(const std::vector<bool>& counted) const;
  // Multiplies this rank's reduced gradients by a scalar tensor (clipping and unscaling).
  void scale_grads(const torch::Tensor& factor);
  // AdamW on this rank's shard, then the updated parameters all-gathered into every rank's model.
  void step(double lr);
  // What the stage shards over the data-parallel group (core/layout.h).
  const ZeroSharding& zero() const { return zero_; }
  bool sharded() const { return zero_.sharded(); }
  // Stage 3: the weights the model gathers unit by unit (null at stages 0-2).
  std::shared_ptr<ShardedParameters> sharded_weights() const { return std::dynamic_pointer_cast<ShardedParameters>(weights_); }
  // Whether main parameters differ from the weights (bf16/fp16 models); otherwise they are the
  // weights themselves (fp32/fp64), or with offload an exact host copy of them.
  bool separate_main() const { return main_.defined() && main_.scalar_type() != weights_->options().dtype(); }
  int64_t steps() const { return step_; }
  StateMemory memory() const;

  // This rank's state of one parameter's elements [offset, offset + numel) (flattened), as
  // views into the optimizer's buffers and the weights: checkpoints read them to save and write
  // them to load (then publish()). Together they cover this rank's shard of every parameter.
  struct StatePiece {
    size_t param = 0;  // in model order
    int64_t offset = 0, numel = 0;
    torch::Tensor weight, main, exp_avg, exp_avg_sq;
  };
  std::vector<StatePiece> state_pieces() const;
  // The number of steps taken, for AdamW's bias correction after a resume.
  void restore_steps(int64_t steps);
  // Main parameters -> the model's parameters on every rank (an all-gather per bucket under
  // ZeRO): collective.
  void publish();

 private:

  Communicator& group_;
  ZeroSharding zero_;
  OptimizerConfig config_;
  std::vector<torch::Tensor> params_;
  // The construction order above, as members are built in declaration order.
  FlatBuckets flat_;
  std::shared_ptr<FlatParameters> weights_;
  DataParallelGrads grads_;
  int64_t rank_;              // whose slices this rank holds (0 when unsharded)
  torch::Tensor main_;        // this rank's main parameters, unless the weights' buffer holds them
  torch::Tensor exp_avg_, exp_avg_sq_;
  torch::Tensor host_grads_;  // offload: this rank's reduced gradients, copied to the host for AdamW
  std::vector<FlatBuckets::Segment> segments_;  // this rank's pieces of parameters
  std::vector<AdamWSlice> slices_;              // one per bucket
  int64_t step_ = 0;
};

}  // namespace trident
