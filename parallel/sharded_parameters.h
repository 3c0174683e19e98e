// ZeRO-3's weights (Rajbhandari et al. 2019, stage 3; PyTorch's FSDP): every data-parallel rank
// keeps only its shard of the flat weights (its slice of every bucket, as the optimizer lays
// them out), and the weights of a unit (a transformer block, or the rest of a model chunk) are
// all-gathered just before they are needed and freed after.
//
// The model keeps its parameter tensors throughout: each is a view of its bucket's gathered
// storage, and freeing gives that storage's memory back (zero bytes; shapes and autograd
// untouched), so the tensors autograd saved for backward see the weights again once the unit
// is gathered again. A freed parameter has no memory behind it: read the weights between
// acquire_all() and publish().
//
// One block unit in one micro-batch (gathered_call arranges it):
//
//   forward   acquire(i) ── prefetch(i+1) ── block i ── release(i)
//   backward  acquire(i) ── prefetch(i-1) ── block i's backward ── release(i)
//             (when its output's gradient arrives)     (when its input's gradient is complete)
//
// so at most two blocks are gathered at a time. The rest of a chunk (embeddings, final
// LayerNorm: used at both ends of it) is acquired by the chunk's forward and kept until
// publish(), which frees everything once the optimizer has updated the shard.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/flat_parameters.h"

namespace trident {

// What gathers a model's units: one parameter group's shards (ShardedParameters), or every
// group's together (ShardedGroups: a block's dense weights and its experts' are sharded over
// different ranks, optim/parameter_groups.h).
class UnitWeights {
 public:
  virtual ~UnitWeights() = default;
  // Gathers the unit's weights into its parameters (waiting for a prefetch in flight).
  // Units this holder does not hold are ignored, here and below.
  virtual void acquire(int64_t unit) = 0;
  // Starts gathering the unit in the background.
  virtual void prefetch(int64_t unit) = 0;
  // Frees the unit's gathered weights.
  virtual void release(int64_t unit) = 0;
  // Gathers every unit, to read the whole weights (e.g. after training, as FSDP's
  // summon_full_params); publish() or release() frees them again.
  virtual void acquire_all() = 0;
  // Bytes of gathered weights held now.
  virtual int64_t gathered_bytes() const = 0;
};

class ShardedParameters : public FlatParameters, public UnitWeights {
 public:
  // `params` in model order, of one dtype and device, as `flat` places them (one bucket holds
  // parameters of one unit only); `units` gives each parameter's unit. Copies this rank's
  // slices into its shard and frees the rest: the weights must be final before.
  ShardedParameters(const std::vector<torch::Tensor>& params, const FlatBuckets& flat,
                    const std::vector<int64_t>& units, Communicator& dp_group);

  torch::Tensor slice(size_t bucket) const override;
  // The shard changed (optimizer step, checkpoint load): frees every gathered unit, so that
  // the next use gathers the new weights.
  void publish() override;
  int64_t bytes() const override;
  torch::TensorOptions options() const override { return shard_.options(); }

  void acquire(int64_t unit) override;
  void prefetch(int64_t unit) override;
  void release(int64_t unit) override;
  void acquire_all() override;
  int64_t gathered_bytes() const override { return gathered_bytes_; }
  // The most bytes held gathered at once since the last reset.
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  void reset_peak() { peak_gathered_bytes_ = gathered_bytes_; }

 private:
  enum class State { freed, gathering, gathered };
  struct Bucket {
    torch::Tensor whole;  // the gathered bucket; the parameters are views of it
    State state = State::freed;
    std::unique_ptr<PendingCollective> pending;
  };
  void start_gather(Bucket& bucket, size_t index);
  void free(Bucket& bucket);
  const std::vector<size_t>& buckets_of(int64_t unit) const;

  Communicator& group_;
  FlatBuckets flat_;
  int64_t rank_;
  torch::Tensor shard_;
  std::vector<Bucket> buckets_;
  std::map<int64_t, std::vector<size_t>> unit_buckets_;
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
};

// Several parameter groups' sharded weights, gathered and freed together unit by unit.
class ShardedGroups : public UnitWeights {
 public:
  explicit ShardedGroups(std::vector<std::shared_ptr<ShardedParameters>> groups) : groups_(std::move(groups)) {}
  void acquire(int64_t unit) override;
  void prefetch(int64_t unit) override;
  void release(int64_t unit) override;
  void acquire_all() override;
  int64_t gathered_bytes() const override;

 private:
  std::vector<std::shared_ptr<ShardedParameters>> groups_;
};

// Runs `function` on `input` with the unit's weights gathered for its forward and gathered
// again for its backward (when autograd records it), prefetching the unit computed after it
// in each direction: `next` in forward, `previous` in backward.
torch::Tensor gathered_call(UnitWeights& weights, int64_t unit, std::optional<int64_t> next,
                            std::optional<int64_t> previous,
                            const std::function<torch::Tensor(const torch::Tensor&)>& function,
                            const torch::Tensor& input);

}  // namespace trident
