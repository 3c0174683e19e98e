#include "parallel/all_to_all.h"

#include <torch/autograd.h>

#include <numeric>

namespace trident {
namespace {

torch::Tensor exchanged(const torch::Tensor& rows, Communicator& group, const std::vector<int64_t>& received,
                        const std::vector<int64_t>& sent) {
  const torch::Tensor in = rows.contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  if (!received.empty()) shape[0] = std::accumulate(received.begin(), received.end(), int64_t(0));
  torch::Tensor out = torch::empty(shape, in.options());
  group.all_to_all(out, in, received, sent);
  return out;
}

struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& rows, Communicator* group,
                               const std::vector<int64_t>& received, const std::vector<int64_t>& sent) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["received"] = received;
    ctx->saved_data["sent"] = sent;
    return exchanged(rows, *group, received, sent);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* group = reinterpret_cast<Communicator*>(ctx->saved_data["group"].toInt());
    const std::vector<int64_t> received = ctx->saved_data["received"].toIntVector();
    const std::vector<int64_t> sent = ctx->saved_data["sent"].toIntVector();
    return {exchanged(grads[0], *group, sent, received), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor exchange_rows(const torch::Tensor& rows, Communicator& group, const std::vector<int64_t>& received_rows,
                            const std::vector<int64_t>& sent_rows) {
  return ExchangeRows::apply(rows, &group, received_rows, sent_rows);
}

}  // namespace trident
