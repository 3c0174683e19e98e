#include "parallel/expert_parallel.h"

#include <numeric>

#include "core/error.h"
#include "parallel/all_to_all.h"

namespace trident {

ExpertDispatch::ExpertDispatch(const torch::Tensor& counts, Communicator& group) : group_(group) {
  const int64_t ep = group.size(), experts = counts.size(0);
  TRIDENT_CHECK(experts % ep == 0, experts, " experts over ", ep, " expert-parallel ranks");
  const int64_t local = experts / ep;
  if (ep == 1) {
    const torch::Tensor host = counts.to(torch::kCPU, torch::kLong);
    local_counts_.assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + experts);
    sent_total_ = std::accumulate(local_counts_.begin(), local_counts_.end(), int64_t(0));
    return;
  }
  // Row i * local + l of `arrived`: what rank i sends to this rank's expert l.
  const torch::Tensor mine = counts.to(torch::kLong).contiguous();
  torch::Tensor arrived = torch::empty_like(mine);
  group.all_to_all(arrived, mine);
  const torch::Tensor sent = mine.cpu(), received = arrived.cpu();
  const int64_t* to = sent.data_ptr<int64_t>();
  const int64_t* from = received.data_ptr<int64_t>();
  local_counts_.assign(size_t(local), 0);
  for (int64_t rank = 0; rank < ep; ++rank) {
    sent_.push_back(std::accumulate(to + rank * local, to + (rank + 1) * local, int64_t(0)));
    received_.push_back(std::accumulate(from + rank * local, from + (rank + 1) * local, int64_t(0)));
    for (int64_t l = 0; l < local; ++l) local_counts_[size_t(l)] += from[rank * local + l];
  }
  sent_total_ = std::accumulate(sent_.begin(), sent_.end(), int64_t(0));
  // Where each received run starts, then the rows in expert-major order.
  std::vector<int64_t> start(size_t(ep * local));
  std::exclusive_scan(from, from + ep * local, start.begin(), int64_t(0));
  std::vector<int64_t> order;
  order.reserve(size_t(std::accumulate(received_.begin(), received_.end(), int64_t(0))));
  for (int64_t l = 0; l < local; ++l)
    for (int64_t rank = 0; rank < ep; ++rank)
      for (int64_t row = 0; row < from[rank * local + l]; ++row) order.push_back(start[size_t(rank * local + l)] + row);
  const auto index_options = torch::TensorOptions().dtype(torch::kLong);
  by_expert_ = torch::tensor(order, index_options).to(counts.device());
  by_source_ = torch::empty_like(by_expert_).scatter_(0, by_expert_, torch::arange(by_expert_.size(0), by_expert_.options()));
}

torch::Tensor ExpertDispatch::dispatch(const torch::Tensor& runs) const {
  if (group_.size() == 1) return runs;
  return exchange_rows(runs, group_, received_, sent_).index_select(0, by_expert_);
}

torch::Tensor ExpertDispatch::combine(const torch::Tensor& outputs) const {
  if (group_.size() == 1) return outputs;
  return exchange_rows(outputs.index_select(0, by_source_), group_, sent_, received_);
}

}  // namespace trident
