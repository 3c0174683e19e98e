#include "parallel/context_parallel.h"

#include <torch/autograd.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"

namespace trident {
namespace {

// The global chunk index of local chunk `local` (0: the early one, 1: the late one) of `rank`.
int64_t global_chunk(int rank, int size, int local) { return local == 0 ? rank : 2 * size - 1 - rank; }

enum class Visibility { all, causal, none };

Visibility visibility(int64_t query_chunk, int64_t key_chunk) {
  return key_chunk < query_chunk ? Visibility::all : key_chunk == query_chunk ? Visibility::causal : Visibility::none;
}

// Scaled scores of a query block over a key block, future positions and `hidden` ones (other
// documents', [b, 1, n, n]; undefined: none) at -inf.
torch::Tensor block_scores(const torch::Tensor& q, const torch::Tensor& k, double scale, Visibility seen,
                           const torch::Tensor& hidden) {
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (seen == Visibility::causal) {
    auto future = torch::ones({q.size(2), k.size(2)}, q.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  if (hidden.defined()) scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  return scores;
}

// Where query chunk `query_chunk` may not look into key chunk `key_chunk` (global chunk indices)
// because the tokens are in different documents: [b, 1, n, n], from the whole sequence's
// document ids [b, s]; undefined without documents.
torch::Tensor other_documents(const torch::Tensor& documents, int64_t chunks, int64_t query_chunk, int64_t key_chunk) {
  if (!documents.defined()) return torch::Tensor();
  const int64_t n = documents.size(1) / chunks;
  return documents.narrow(1, query_chunk * n, n).unsqueeze(2).ne(documents.narrow(1, key_chunk * n, n).unsqueeze(1))
      .unsqueeze(1);
}

// A log-sum-exp that is -inf (a row that saw no key) as 0, so that exp(x - it) is 0, not NaN.
torch::Tensor finite(const torch::Tensor& lse) { return lse.masked_fill(lse.isinf(), 0); }

torch::Dtype compute_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// Sends `tensor` to the next rank of the ring and receives the previous rank's into a new one.
struct RingShift {
  torch::Tensor received;
  std::unique_ptr<PendingCollective> pending;
  RingShift(Communicator& group, const torch::Tensor& tensor) : received(torch::empty_like(tensor)) {
    const int rank = group.rank(), size = group.size();
    pending = group.exchange_async({{tensor, (rank + 1) % size, /*send=*/true},
                                    {received, (rank + size - 1) % size, /*send=*/false}},
                                   "exchange");
  }
  torch::Tensor wait() {
    pending->wait();
    return received;
  }
};

// Dropout of attention probabilities, block by block: scaled masks (0 or 1 / (1 - p)) drawn
// from a stream that starts at `state`; the same state gives the same masks in the same order.
class BlockDropout {
 public:
  BlockDropout(double p, torch::Tensor state) : p_(p), stream_() { stream_.set_state(std::move(state)); }
  // The next block's scaled mask, undefined without dropout.
  torch::Tensor draw(const torch::Tensor& probs) {
    if (p_ == 0) return torch::Tensor();
    return stream_.fork(probs.device(), [&] { return torch::empty_like(probs).bernoulli_(1 - p_) / (1 - p_); });
  }
  torch::Tensor apply(const torch::Tensor& probs) {
    const auto mask = draw(probs);
    return mask.defined() ? probs * mask : probs;
  }
  const torch::Tensor& state() const { return stream_.state(); }

 private:
  double p_;
  RandomStream stream_;
};

// The gradient of repeat_for_query_heads' output [b, groups * per_group, n, d], summed back to
// the groups.
torch::Tensor to_groups(const torch::Tensor& grad, int64_t per_group) {
  return per_group == 1 ? grad : grad.reshape({grad.size(0), -1, per_group, grad.size(2), grad.size(3)}).sum(2);
}

// One chunk of a local tensor [b, heads, 2n, d] along the sequence.
torch::Tensor chunk(const torch::Tensor& t, int local) {
  const int64_t n = t.size(2) / 2;
  return t.narrow(2, local * n, n);
}

// The ring: at step j the keys and values in hand (`kv`, [2, b, heads, 2n, d]) are rank
// (rank - j)'s, and the next step's are already on their way. `block(a, b, seen, kv, hidden)`
// runs for every pair of local query chunk a and key chunk b that is not fully masked by
// causality, `hidden` masking the pairs of tokens in different `documents` (other_documents);
// `step_done()` after each step, once the next keys and values have arrived.
template <typename Block, typename StepDone>
void walk_ring(Communicator& group, torch::Tensor kv, const torch::Tensor& documents, const Block& block,
               const StepDone& step_done) {
  const int rank = group.rank(), size = group.size();
  for (int step = 0; step < size; ++step) {
    const int source = (rank + size - step) % size;
    std::optional<RingShift> next;
    if (step + 1 < size) next.emplace(group, kv);
    for (int a : {0, 1})
      for (int b : {0, 1}) {
        const int64_t query_chunk = global_chunk(rank, size, a), key_chunk = global_chunk(source, size, b);
        const Visibility seen = visibility(query_chunk, key_chunk);
        if (seen != Visibility::none) block(a, b, seen, kv, other_documents(documents, 2 * size, query_chunk, key_chunk));
      }
    if (next) kv = next->wait();
    step_done();
  }
}

struct RingAttention : public torch::autograd::Function<RingAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& k_in, const torch::Tensor& v_in, Communicator* group,
                               double dropout, RandomStream* stream, const torch::Tensor* documents_in) {
    // By pointer: autograd takes every tensor argument for an input, and this one may be undefined.
    const torch::Tensor documents = *documents_in;
    // Backward draws the same masks again, in the same order, from the stream as it is now.
    ctx->saved_data["dropout"] = dropout;
    const torch::Tensor start = dropout > 0 ? stream->started_state(q_in.device()) : torch::Tensor();
    if (dropout > 0) ctx->saved_data["rng"] = start;
    BlockDropout masks(dropout, start);
    const auto dtype = compute_dtype(q_in);
    const auto q = q_in.to(dtype), k = k_in.to(dtype), v = v_in.to(dtype);
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    const int64_t per_group = q.size(1) / k.size(1);
    const auto for_queries = [&](const torch::Tensor& t) { return repeat_for_query_heads(t, per_group); };
    std::array<torch::Tensor, 2> out, lse;  // per local query chunk
    for (int a : {0, 1}) {
      out[a] = torch::zeros_like(chunk(q, a));
      lse[a] = torch::full(out[a].sizes().slice(0, 3), -std::numeric_limits<double>::infinity(), q.options());
    }
    walk_ring(
        *group, torch::stack({k, v}), documents,
        [&](int a, int b, Visibility seen, const torch::Tensor& kv, const torch::Tensor& hidden) {
          const auto scores = block_scores(chunk(q, a), for_queries(chunk(kv[0], b)), scale, seen, hidden);
          // With documents a query may see no key of a block (its lse -inf), or none yet.
          const auto block_lse = scores.logsumexp(-1);
          const auto probs = masks.apply((scores - finite(block_lse).unsqueeze(-1)).exp());
          const auto block_out = at::matmul(probs, for_queries(chunk(kv[1], b)));
          const auto merged = torch::logaddexp(lse[a], block_lse);
          out[a] = out[a] * (lse[a] - finite(merged)).exp().unsqueeze(-1) +
                   block_out * (block_lse - finite(merged)).exp().unsqueeze(-1);
          lse[a] = merged;
        },
        [] {});
    if (dropout > 0) stream->set_state(masks.state());
    const torch::Tensor output = torch::cat({out[0], out[1]}, 2);
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["documents"] = documents.defined() ? c10::IValue(documents) : c10::IValue();
    ctx->save_for_backward({q, k, v, output, torch::cat({lse[0], lse[1]}, 2)});
    return output.to(q_in.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* group = reinterpret_cast<Communicator*>(ctx->saved_data["group"].toInt());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &output = saved[3], &lse = saved[4];
    const torch::Tensor grad_out = grads[0].to(q.scalar_type());
    const double dropout = ctx->saved_data["dropout"].toDouble();
    const c10::IValue& saved_documents = ctx->saved_data["documents"];
    const torch::Tensor documents = saved_documents.isNone() ? torch::Tensor() : saved_documents.toTensor();
    BlockDropout masks(dropout, dropout > 0 ? ctx->saved_data["rng"].toTensor() : torch::Tensor());
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    const int64_t per_group = q.size(1) / saved[1].size(1);
    const auto for_queries = [&](const torch::Tensor& t) { return repeat_for_query_heads(t, per_group); };
    // The softmax gradient's row term: sum_j P_ij dP_ij = rowsum(dO * O).
    const torch::Tensor delta = (grad_out * output).sum(-1);
    torch::Tensor grad_q = torch::zeros_like(q);
    const torch::Tensor kv = torch::stack({saved[1], saved[2]});
    torch::Tensor grad_kv = torch::zeros_like(kv);  // travels with the keys and values it belongs to
    walk_ring(
        *group, kv, documents,
        [&](int a, int b, Visibility seen, const torch::Tensor& kv, const torch::Tensor& hidden) {
          const auto qa = chunk(q, a), dout = chunk(grad_out, a);
          const auto ka = for_queries(chunk(kv[0], b)), va = for_queries(chunk(kv[1], b));
          // Every query sees at least itself: its final lse is finite.
          const auto probs = (block_scores(qa, ka, scale, seen, hidden) - chunk(lse.unsqueeze(-1), a)).exp();
          // With dropout: O = (P * Z) V for the scaled mask Z, so dV = (P * Z)^T dO and
          // dP = (dO V^T) * Z; delta = rowsum(dO * O) = sum_j P_ij dP_ij still holds.
          const auto mask = masks.draw(probs);
          const auto kept = mask.defined() ? probs * mask : probs;
          chunk(grad_kv[1], b).add_(to_groups(at::matmul(kept.transpose(-2, -1), dout), per_group));
          auto grad_probs = at::matmul(dout, va.transpose(-2, -1));
          if (mask.defined()) grad_probs = grad_probs * mask;
          const auto grad_scores = probs * (grad_probs - chunk(delta.unsqueeze(-1), a));
          chunk(grad_q, a).add_(at::matmul(grad_scores, ka) * scale);
          chunk(grad_kv[0], b).add_(to_groups(at::matmul(grad_scores.transpose(-2, -1), qa) * scale, per_group));
        },
        // After the last step the gradients in hand are the next rank's own: one more shift.
        [&] { grad_kv = RingShift(*group, grad_kv).wait(); });
    const auto type = grads[0].scalar_type();
    return {grad_q.to(type), grad_kv[0].to(type), grad_kv[1].to(type), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor repeat_for_query_heads(const torch::Tensor& t, int64_t per_group) {
  return per_group == 1 ? t : t.repeat_interleave(per_group, 1);
}

torch::Tensor context_parallel_slice(const torch::Tensor& x, int64_t dim, int rank, int size) {
  if (size == 1) return x;
  const int64_t length = x.size(dim);
  TRIDENT_CHECK(length % (2 * size) == 0, "a sequence of ", length, " cannot be cut into ", 2 * size, " chunks");
  const int64_t n = length / (2 * size);
  return torch::cat({x.narrow(dim, global_chunk(rank, size, 0) * n, n), x.narrow(dim, global_chunk(rank, size, 1) * n, n)},
                    dim);
}

torch::Tensor context_parallel_positions(int64_t seq_length, int rank, int size, torch::TensorOptions options) {
  return context_parallel_slice(torch::arange(seq_length, options), 0, rank, size);
}

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const ContextParallel& cp, double dropout, RandomStream* stream,
                             const torch::Tensor& documents) {
  TRIDENT_CHECK(q.dim() == 4 && q.size(2) % 2 == 0, "ring attention takes [b, heads, 2n, d] queries, got ", q.sizes());
  TRIDENT_CHECK(k.sizes() == v.sizes() && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
                "ring attention takes keys and values of a number of heads dividing the queries', got ", k.sizes(),
                " and ", v.sizes(), " for ", q.sizes());
  TRIDENT_CHECK(dropout == 0 || stream, "ring attention with dropout needs a random stream");
  TRIDENT_CHECK(!documents.defined() || documents.sizes() == torch::IntArrayRef({q.size(0), q.size(2) * cp.size()}),
                "ring attention takes the whole sequence's document ids [b, s], got ", documents.sizes(), " for ",
                q.sizes(), " queries on each of ", cp.size(), " ranks");
  return RingAttention::apply(q, k, v, cp.group.get(), dropout, stream, &documents);
}

}  // namespace trident
