#include "train/stage_forward.h"

#include <cmath>

#include "core/error.h"
#include "core/text.h"
#include "parallel/comm/process_groups.h"
#include "parallel/comm/trace_span.h"
#include "parallel/context_parallel.h"

namespace trident {

StageForward::StageForward(const Config& config, const Layout& layout, PipelineSchedule schedule,
                           const ProcessGroups& groups, torch::Device device, torch::Dtype dtype, const GPTData& data,
                           std::vector<GPT>& chunks, const Hooks& hooks, const int64_t& iteration)
    : config_(config), layout_(layout), groups_(groups), device_(device), data_(data), chunks_(chunks), hooks_(hooks),
      iteration_(iteration) {
  pipeline_ = pipeline_options(std::move(schedule), groups.coordinates().pp,
                               {layout.micro_batch, layout.local_sequence(config.model.seq_length),
                                config.model.hidden_size},
                               torch::TensorOptions().dtype(dtype).device(device));
}

torch::Tensor StageForward::operator()(const Samples& samples, int64_t consumed, int64_t chunk, int64_t micro,
                                       const torch::Tensor& input) {
  GPT& model = chunks_[size_t(chunk)];
  const bool first = model->stage().embedding, last = model->stage().head;
  const DataConfig& data = config_.data;
  const int64_t size = layout_.micro_batch;
  const auto& at = groups_.coordinates();
  Batch batch;
  if (first || last || data.documents()) {  // every layer needs the documents
    TRIDENT_TRACE_SPAN("data: micro-batch ", micro, " of ", size, " samples");
    batch = samples.batch(sample_position(consumed, micro, size, at.dp, layout_.dp_size), size);
  }
  // This rank's chunks of each sequence; from pinned memory, copies to the GPU do not make the
  // host wait for them.
  auto to_device = [&](const torch::Tensor& t) {
    return device_.is_cuda() ? t.pin_memory().to(device_, /*non_blocking=*/true) : t;
  };
  auto rank_chunks = [&](const torch::Tensor& whole) {
    return to_device(context_parallel_slice(whole, 1, at.cp, int(layout_.cp_size)).contiguous());
  };
  Documents documents;
  if (data.documents()) {
    const PackedDocuments packed = packed_documents(batch.tokens, data_.end_of_document);
    if (data.reset_attention_mask) documents.ids = to_device(packed.ids);  // the whole sequence's
    if (data.reset_position_ids) documents.positions = rank_chunks(packed.positions);
  }
  const torch::Tensor x = first ? rank_chunks(batch.tokens) : input;
  if (!last) return model->forward(x, documents);
  const torch::Tensor mask = loss_mask(batch);
  TokenLoss token_loss;
  if (hooks_.loss)
    token_loss = [this](const TokenLossInput& in) {
      torch::Tensor losses;
      run_hook("loss", in.training ? iteration_ + 1 : iteration_, layout_.world_size(), [&] {
        losses = hooks_.loss(in);
        check_program_loss(losses, in.targets, in.tp);
      });
      return losses;
    };
  return model->loss(x, rank_chunks(batch.targets), documents, mask.defined() ? rank_chunks(mask) : mask, token_loss);
}

void StageForward::check_program_loss(const torch::Tensor& losses, const torch::Tensor& targets, Communicator& tp) {
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

torch::Tensor StageForward::loss_mask(const Batch& batch) const {
  torch::Tensor mask = batch.loss_mask;
  if (config_.data.eod_mask_loss) {
    const torch::Tensor not_end = batch.tokens.ne(data_.end_of_document).to(torch::kUInt8);
    mask = mask.defined() ? mask * not_end : not_end;
  }
  return mask;
}

double StageForward::loss_normalizer(const Samples& samples, int64_t consumed) const {
  if (!config_.data.eod_mask_loss && !samples.has_loss_mask()) return 1;
  const torch::Tensor mask = loss_mask(samples.batch(consumed, config_.batch.global_batch_size));
  const int64_t counted = mask.sum().item<int64_t>();
  if (counted == 0)
    fail("no target of the global batch at sample ", consumed, " of ", &samples == data_.train.get() ? "training" : "validation",
         " counts towards the loss (", samples.has_loss_mask() ? "the program's loss masks" : "",
         samples.has_loss_mask() && config_.data.eod_mask_loss ? " with " : "",
         config_.data.eod_mask_loss ? "data.eod_mask_loss, no loss where the input is the end-of-document token" : "",
         "); there is no loss to take");
  return double(mask.numel()) / double(counted);
}

}  // namespace trident
