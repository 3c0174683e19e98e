// Each tensor-parallel layer, run over the whole job as one TP group (2, 3 or 4 ranks),
// against the unsharded layer built from the same full weights: outputs and every gradient,
// in fp64. Also the number of collectives a transformer block issues.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/split_backward.h"
#include "parallel/tensor_parallel.h"
#include "tests/helpers.h"
#include "tests/multiprocess.h"

using namespace trident;

namespace {

constexpr int64_t kBatch = 2, kSeq = 12, kIn = 24, kOut = 36;  // divisible by 2, 3 and 4

std::shared_ptr<Communicator> group() { return trident::testing::world_shared(); }
int n() { return group()->size(); }
int me() { return group()->rank(); }

// The same values on every rank.
torch::Tensor shared_random(std::vector<int64_t> shape, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  return at::normal(0.0, 1.0, shape, generator, torch::TensorOptions().dtype(torch::kDouble));
}

torch::Tensor mine(const torch::Tensor& whole, int64_t dim) {
  return whole.chunk(n(), dim)[size_t(me())].contiguous();
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, const char* what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(torch::allclose(actual, expected, 1e-10, 1e-12)) << what << " differs by "
                                                                << (actual - expected).abs().max().item<double>();
}

// Gathers a tensor split along `dim` over the group, to check a sharded gradient as a whole.
torch::Tensor whole(const torch::Tensor& part, int64_t dim) {
  auto parts = torch::empty({n(), part.numel()}, part.options());
  auto flat = parts.view(-1);
  group()->all_gather(flat, part.contiguous().view(-1));
  std::vector<torch::Tensor> pieces;
  for (int r = 0; r < n(); ++r) pieces.push_back(parts[r].view(part.sizes()));
  return torch::cat(pieces, dim);
}

}  // namespace

TEST(TensorParallelLayers, ColumnParallelLinear) {
  for (bool gather_output : {false, true}) {
    for (bool sequence_parallel : {false, true}) {
      auto w = shared_random({kOut, kIn}, 1), b = shared_random({kOut}, 2);
      auto x = shared_random({kBatch, kSeq, kIn}, 3), g = shared_random({kBatch, kSeq, kOut}, 4);
      auto w_ref = w.clone().requires_grad_(), b_ref = b.clone().requires_grad_(),
           x_ref = x.clone().requires_grad_();
      auto y_ref = torch::nn::functional::linear(x_ref, w_ref, b_ref);
      (y_ref * g).sum().backward();

      ColumnParallelLinear layer(kIn, kOut, TensorParallel{group(), sequence_parallel}, Init::normal,
                                 gather_output ? ColumnOutput::gathered : ColumnOutput::split);
      layer->to(torch::kDouble);
      {
        torch::NoGradGuard no_grad;
        layer->weight.copy_(mine(w, 0));
        layer->bias.copy_(mine(b, 0));
      }
      auto x_local = (sequence_parallel ? mine(x, 1) : x).requires_grad_();
      auto y = layer(x_local);
      expect_close(y, gather_output ? y_ref : mine(y_ref, 2), "output");
      (y * (gather_output ? g : mine(g, 2))).sum().backward();
      expect_close(layer->weight.grad(), mine(w_ref.grad(), 0), "weight grad");
      expect_close(layer->bias.grad(), mine(b_ref.grad(), 0), "bias grad");
      expect_close(x_local.grad(), sequence_parallel ? mine(x_ref.grad(), 1) : x_ref.grad(), "input grad");
    }
  }
}

// bf16 column-parallel layers under sequence parallelism (SwiGLU's gate and up on one shard) with
// their weights' gradients accumulated in an fp32 buffer (gradient-accumulation fusion,
// parallel/linear_multiply.h): the re-gathered rows' products land in the buffer, in fp32, and
// never in .grad; over two micro-batches the buffer holds the fp64 reference's sum to fp32's
// rounding, where bf16 gradients added one by one would be off by bf16's.
TEST(TensorParallelLayers, SequenceParallelWeightGradientsGoIntoTheFp32Buffer) {
  const auto bf16 = torch::kBFloat16;
  auto w_gate = shared_random({kOut, kIn}, 11).to(bf16), w_up = shared_random({kOut, kIn}, 12).to(bf16);
  std::vector<torch::Tensor> xs, gs;
  for (uint64_t m = 0; m < 2; ++m) {
    xs.push_back(shared_random({kBatch, kSeq, kIn}, 13 + m).to(bf16));
    gs.push_back(shared_random({kBatch, kSeq, kOut}, 15 + m).to(bf16));
  }
  const TensorParallel tp{group(), true};
  ColumnParallelLinear gate(kIn, kOut, tp, Init::normal, ColumnOutput::split, false),
      up(kIn, kOut, tp, Init::normal, ColumnOutput::split, false);
  gate->to(bf16);
  up->to(bf16);
  {
    torch::NoGradGuard no_grad;
    gate->weight.copy_(mine(w_gate, 0));
    up->weight.copy_(mine(w_up, 0));
  }
  const std::vector<torch::Tensor> params = {gate->weight, up->weight};
  int seen = 0;
  for (const auto& w : params) w.register_hook([&](const torch::Tensor& g) { seen += g.defined(); });
  trident::testing::FakeGroup one(0, 1);
  GradBufferOptions options;
  options.zero = ZeroSharding{0, 1};
  DataParallelGrads grads(params, make_grad_buckets(params, 1 << 20, torch::kFloat, options.zero), one, options);
  grads.zero();
  for (size_t m = 0; m < 2; ++m) {
    if (m == 1) grads.arm();
    const auto outputs = column_parallel_sharing_input({gate.get(), up.get()}, mine(xs[m], 1));
    (outputs[0].to(torch::kFloat) * mine(gs[m], 2).to(torch::kFloat) +
     2 * outputs[1].to(torch::kFloat) * mine(gs[m], 2).to(torch::kFloat))
        .sum()
        .backward();
  }
  grads.finish();
  EXPECT_EQ(seen, 0);
  const FlatBuckets& flat = grads.flat();
  for (size_t i = 0; i < 2; ++i) {
    auto exact = torch::zeros({kOut, kIn}, torch::kDouble);
    for (size_t m = 0; m < 2; ++m)
      exact += (i == 0 ? 1.0 : 2.0) *
               gs[m].to(torch::kDouble).reshape({-1, kOut}).t().mm(xs[m].to(torch::kDouble).reshape({-1, kIn}));
    const auto got = grads.reduced(0).narrow(0, flat.offset[i], flat.numel[i]).view({kOut / n(), kIn});
    const double error = (got.to(torch::kDouble) - mine(exact, 0)).abs().max().item<double>();
    EXPECT_LT(error, 1e-5 * exact.abs().max().item<double>()) << (i == 0 ? "gate" : "up");
  }
}

// With sequence parallelism a column-parallel layer keeps its input's shard and gathers it again
// in backward: an input changed in place after the forward is one error, on every rank, not a
// wrong weight gradient.
TEST(TensorParallelLayers, AnInputChangedInPlaceBeforeItsGatherAgainIsOneError) {
  ColumnParallelLinear layer(kIn, kOut, TensorParallel{group(), true});
  layer->to(torch::kDouble);
  const auto x = mine(shared_random({kBatch, kSeq, kIn}, 3), 1);
  const auto y = layer(x);
  x.add_(1);
  try {
    y.sum().backward();
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("a column-parallel layer's input was modified in place after its forward"),
              std::string::npos)
        << e.what();
  }
}

TEST(TensorParallelLayers, RowParallelLinear) {
  for (auto [input_is_parallel, sequence_parallel] :
       {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
    auto w = shared_random({kOut, kIn}, 5), b = shared_random({kOut}, 6);
    auto x = shared_random({kBatch, kSeq, kIn}, 7), g = shared_random({kBatch, kSeq, kOut}, 8);
    auto w_ref = w.clone().requires_grad_(), b_ref = b.clone().requires_grad_(),
         x_ref = x.clone().requires_grad_();
    auto y_ref = torch::nn::functional::linear(x_ref, w_ref, b_ref);
    (y_ref * g).sum().backward();

    RowParallelLinear layer(kIn, kOut, TensorParallel{group(), sequence_parallel}, Init::normal,
                            input_is_parallel ? RowInput::split : RowInput::whole);
    layer->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;
      layer->weight.copy_(mine(w, 1));
      layer->bias.copy_(b);
    }
    auto x_local = (input_is_parallel ? mine(x, 2) : x).requires_grad_();
    auto y = layer(x_local);
    expect_close(y, sequence_parallel ? mine(y_ref, 1) : y_ref, "output");
    (y * (sequence_parallel ? mine(g, 1) : g)).sum().backward();
    expect_close(layer->weight.grad(), mine(w_ref.grad(), 1), "weight grad");
    auto bias_grad = layer->bias.grad().clone();
    // With sequence parallelism each rank's bias sees its part of the sequence only.
    if (sequence_parallel) group()->all_reduce(bias_grad, ReduceOp::sum);
    expect_close(bias_grad, b_ref.grad(), "bias grad");
    expect_close(x_local.grad(), input_is_parallel ? mine(x_ref.grad(), 2) : x_ref.grad(), "input grad");
  }
}

TEST(TensorParallelLayers, VocabParallelEmbedding) {
  const int64_t vocab = 48, hidden = 8;
  auto table = shared_random({vocab, hidden}, 9), g = shared_random({kBatch, kSeq, hidden}, 10);
  auto ids = torch::randint(0, vocab, {kBatch, kSeq}, at::detail::createCPUGenerator(11), torch::kLong);
  auto table_ref = table.clone().requires_grad_();
  auto y_ref = torch::embedding(table_ref, ids);
  (y_ref * g).sum().backward();

  VocabParallelEmbedding layer(vocab, hidden, TensorParallel{group()});
  layer->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    layer->weight.copy_(mine(table, 0));
  }
  auto y = layer(ids);
  expect_close(y, y_ref, "output");
  (y * g).sum().backward();
  expect_close(layer->weight.grad(), mine(table_ref.grad(), 0), "weight grad");
}

TEST(TensorParallelLayers, VocabParallelCrossEntropyNeverGathersLogits) {
  const int64_t tokens = 30, vocab = 48;
  auto logits = shared_random({tokens, vocab}, 12).mul(3);
  auto targets = torch::randint(0, vocab, {tokens}, at::detail::createCPUGenerator(13), torch::kLong);
  auto logits_ref = logits.clone().requires_grad_();
  auto loss_ref = torch::nn::functional::cross_entropy(
      logits_ref, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  auto weights = shared_random({tokens}, 14);
  (loss_ref * weights).sum().backward();

  auto local = mine(logits, 1).requires_grad_();
  auto loss = vocab_parallel_cross_entropy(local, targets, *group());
  expect_close(loss, loss_ref, "per-token loss");
  (loss * weights).sum().backward();
  expect_close(local.grad(), mine(logits_ref.grad(), 1), "logit grad");
  expect_close(whole(local.grad(), 1), logits_ref.grad(), "logit grad, gathered");
}

namespace {

// Counts the collectives passing through to the real group.
class CountingGroup : public Communicator {
 public:
  explicit CountingGroup(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend() const override { return inner_.backend(); }
  void all_reduce(torch::Tensor& t, ReduceOp op) override { ++all_reduces; inner_.all_reduce(t, op); }
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) override {
    ++reduce_scatters;
    inner_.reduce_scatter(out, in, op);
  }
  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    ++all_gathers;
    inner_.all_gather(out, in);
  }
  void broadcast(torch::Tensor& t, int root) override { inner_.broadcast(t, root); }
  void send(const torch::Tensor& t, int peer) override { inner_.send(t, peer); }
  void recv(torch::Tensor& t, int peer) override { inner_.recv(t, peer); }
  void exchange(std::vector<Transfer>& transfers) override { inner_.exchange(transfers); }
  void barrier() override { inner_.barrier(); }
  std::shared_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }
  void reset() { all_reduces = reduce_scatters = all_gathers = 0; }
  int all_reduces = 0, reduce_scatters = 0, all_gathers = 0;

 private:
  Communicator& inner_;
};

}  // namespace

// Megatron's accounting: a block issues 2 all-reduces forward and 2 backward; with sequence
// parallelism each becomes an all-gather plus a reduce-scatter (same volume, no all-reduce),
// and backward gathers the two column-parallel layers' inputs again (kept as their shards).
// SwiGLU's gate and up take one gathered input: no collective more.
TEST(TensorParallelLayers, CollectivesPerBlockMatchTheory) {
  ModelConfig config;
  config.hidden_size = kIn;
  config.num_attention_heads = 12;
  config.seq_length = kSeq;
  for (const auto [activation, sequence_parallel] :
       {std::pair{Activation::gelu, false}, std::pair{Activation::gelu, true}, std::pair{Activation::swiglu, false},
        std::pair{Activation::swiglu, true}}) {
    SCOPED_TRACE(std::string(activation == Activation::swiglu ? "SwiGLU" : "GELU") +
                 (sequence_parallel ? " with sequence parallelism" : ""));
    config.activation = activation;
    auto counting = std::make_shared<CountingGroup>(*group());
    auto block = make_block({config, TensorParallel{counting, sequence_parallel}, Recompute::none, ContextParallel{},
                             std::make_shared<DropoutStreams>(), 0, std::make_shared<AuxiliaryLosses>()});
    block->to(torch::kDouble);
    for (auto& p : block->parameters()) {
      torch::NoGradGuard no_grad;
      p.normal_(0, 0.1);
    }
    auto x = shared_random({kBatch, sequence_parallel ? kSeq / n() : kSeq, kIn}, 15).requires_grad_();
    auto y = block->forward(x);
    if (!sequence_parallel) {
      EXPECT_EQ(counting->all_reduces, 2);
    } else {
      EXPECT_EQ(counting->all_reduces, 0);
      EXPECT_EQ(counting->all_gathers, 2);
      EXPECT_EQ(counting->reduce_scatters, 2);
    }
    counting->reset();
    y.sum().backward();
    if (!sequence_parallel) {
      EXPECT_EQ(counting->all_reduces, 2);
      EXPECT_EQ(counting->all_gathers + counting->reduce_scatters, 0);
    } else {  // and the column-parallel layers' inputs gathered again (the attention's, the MLP's)
      EXPECT_EQ(counting->all_reduces, 0);
      EXPECT_EQ(counting->all_gathers, 2 + 2);
      EXPECT_EQ(counting->reduce_scatters, 2);
    }
    if (!sequence_parallel) continue;
    // Split in two (the zero-bubble schedules): I, the input's gradient, gathers nothing again;
    // W gathers the two inputs, SwiGLU's gate and up theirs once.
    counting->reset();
    WeightGrads weights;
    x.mutable_grad() = torch::Tensor();
    const auto y_again = block->forward(x);
    counting->reset();
    backward_inputs({y_again}, {torch::ones_like(y_again)}, {x}, weights);
    EXPECT_EQ(counting->all_gathers, 2);
    EXPECT_EQ(counting->reduce_scatters, 2);
    counting->reset();
    weights.run();
    EXPECT_EQ(counting->all_gathers, 2);
    EXPECT_EQ(counting->reduce_scatters, 0);
  }
}

namespace {

// Dropout masks (kept elements) that `stream` draws on this rank, gathered from every rank.
torch::Tensor gathered_masks(RandomStream& stream) {
  const auto kept = dropout(torch::ones({256}, torch::kDouble), 0.5, /*training=*/true, stream).ne(0).to(torch::kDouble);
  auto all = torch::empty({n(), 256}, torch::kDouble);
  auto flat = all.view(-1);
  group()->all_gather(flat, kept);
  return all;
}

}  // namespace

// Megatron's two dropout streams: the replicated one agrees across TP ranks (whole
// activations stay equal copies), the model-parallel one differs (other heads, other tokens);
// both differ across CP ranks, which hold other tokens.
TEST(DropoutStreams, AgreeWhereActivationsAreCopiesAndDifferWhereTheyAreSplit) {
  DropoutStreams as_tp_rank, as_cp_rank;
  as_tp_rank.reseed(7, /*iteration=*/1, /*first_slot=*/0, /*tp_rank=*/me(), /*cp_rank=*/0);
  as_cp_rank.reseed(7, /*iteration=*/1, /*first_slot=*/0, /*tp_rank=*/0, /*cp_rank=*/me());
  const auto replicated = gathered_masks(as_tp_rank.replicated), split = gathered_masks(as_tp_rank.model_parallel);
  const auto across_cp = gathered_masks(as_cp_rank.replicated);
  for (int r = 1; r < n(); ++r) {
    EXPECT_TRUE(torch::equal(replicated[r], replicated[0])) << "rank " << r;
    EXPECT_FALSE(torch::equal(split[r], split[0])) << "rank " << r;
    EXPECT_FALSE(torch::equal(across_cp[r], across_cp[0])) << "rank " << r;
  }
}

// The model's own use of them: without sequence parallelism the activations leaving a stage
// are whole on every TP rank and must stay equal copies with hidden and attention dropout on.
TEST(DropoutStreams, TensorParallelCopiesStayEqualWithDropoutOn) {
  ModelConfig config;
  config.num_layers = 2;
  config.hidden_size = 24;
  config.num_attention_heads = 12;  // divisible by 2, 3 and 4
  config.seq_length = kSeq;
  config.vocab_size = 64;
  config.hidden_dropout = 0.3;
  config.attention_dropout = 0.3;
  GPT model(config, config.padded_vocab(n()), TensorParallel{group(), false}, Stage{0, 2, true, false});
  model->to(torch::kDouble);
  model->initialize(5);
  model->train();
  const auto tokens = shared_random({kBatch, kSeq}, 6).abs().mul(10).to(torch::kLong);
  const auto x = model->forward(tokens).contiguous();
  auto all = torch::empty({n(), x.numel()}, x.options());
  auto flat = all.view(-1);
  group()->all_gather(flat, x.view(-1));
  for (int r = 1; r < n(); ++r) EXPECT_TRUE(torch::equal(all[r], all[0])) << "rank " << r;
  EXPECT_FALSE(torch::equal(x, [&] {
    torch::NoGradGuard no_grad;
    model->eval();
    return model->forward(tokens);
  }())) << "dropout did not act";
}
