#include "core/plan/time_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/plan/flops.h"
#include "core/plan/memory.h"
#include "core/schedule/pipeline_simulation.h"
#include "core/text.h"

namespace trident {
namespace {

constexpr double kHalf = 2;  // bytes of a 16-bit value

double ceil_to(double x, double multiple) { return std::ceil(x / multiple) * multiple; }

// Ring collectives over n ranks at `gbs` GB/s: an all-reduce moves 2 (n-1)/n of the bytes, a
// reduce-scatter or all-gather (n-1)/n.
double all_reduce_seconds(double bytes, int64_t n, double gbs) {
  return n <= 1 ? 0 : 2.0 * double(n - 1) / double(n) * bytes / (gbs * 1e9);
}
double half_collective_seconds(double bytes, int64_t n, double gbs) { return all_reduce_seconds(bytes, n, gbs) / 2; }

// One micro-batch through one pipeline stage's compute, in seconds.
struct StageWork {
  double forward = 0, backward = 0;  // backward includes recomputation
};

struct LayerShape {
  double tokens, hidden, qkv, ffn, heads, head_dim, queries, keys, batch, t;
  double block_keys;  // keys per attention block: the sequence, or its ring attention block
  double ring;        // ranks of the ring attention (1: none)
  // A Mixture-of-Experts layer: each token through `copies` (k) experts of width ffn (the
  // experts' multiplies as one of k x tokens rows), its router's E scores; 1 and 0 otherwise.
  double copies = 1, experts = 0, shared = 0;  // shared: the shared expert's width (every token)
  bool gated;  // SwiGLU: gate and up multiplies
  bool rms;    // RMSNorm, which eager PyTorch computes in several passes (LayerNorm is one kernel)
  bool sequence_parallel;
  bool hidden_dropout, attention_dropout, rotary;
};

// A dense layer's shape, or with `experts` a Mixture-of-Experts layer's.
LayerShape layer_shape(const ModelConfig& m, const Layout& layout, bool experts) {
  LayerShape l;
  l.batch = double(layout.micro_batch);
  l.queries = double(m.seq_length / layout.cp_size);
  l.keys = double(m.seq_length);
  l.block_keys = double(m.seq_length / layout.ring_size());
  l.ring = double(layout.ring_size());
  l.tokens = l.batch * l.queries;
  l.hidden = double(m.hidden_size);
  l.qkv = double(m.qkv_rows());
  l.ffn = double(experts ? m.moe_ffn() : m.ffn());
  if (experts) {
    l.copies = double(m.moe_router_topk);
    l.experts = double(m.num_moe_experts);
    l.shared = double(m.moe_shared_expert_intermediate_size);
  }
  l.gated = m.activation == Activation::swiglu;
  l.rms = m.normalization == Normalization::rmsnorm;
  l.heads = double(m.num_attention_heads);
  l.head_dim = double(m.head_dim());
  l.t = double(layout.tp_size);
  l.sequence_parallel = layout.sequence_parallel;
  l.hidden_dropout = m.hidden_dropout > 0;
  l.attention_dropout = m.attention_dropout > 0;
  l.rotary = m.position_embedding_type == PositionEmbeddingType::rope;
  return l;
}

// The kinds of layer `count` layers hold, `with_experts` of them Mixture-of-Experts layers:
// each shape once, with how many layers it stands for (the estimates price each kind once).
std::vector<std::pair<LayerShape, double>> layer_kinds(const ModelConfig& m, const Layout& layout, int64_t count,
                                                       int64_t with_experts) {
  std::vector<std::pair<LayerShape, double>> kinds;
  if (count > with_experts) kinds.emplace_back(layer_shape(m, layout, false), double(count - with_experts));
  if (with_experts > 0) kinds.emplace_back(layer_shape(m, layout, true), double(with_experts));
  return kinds;
}

// A layer's linear multiplies forward over its tokens on one TP rank: QKV (h x (a + 2g) d), the
// attention projection, the MLP's up (and SwiGLU's gate) and down.
std::vector<GemmShape> layer_multiplies(const LayerShape& l) {
  const double rows = l.tokens, h = l.hidden, f = l.ffn, t = l.t, routed = rows * l.copies;
  std::vector<GemmShape> out = {GemmShape{rows, l.qkv / t, h}, GemmShape{rows, h, l.heads * l.head_dim / t}, GemmShape{routed, f / t, h},
                                GemmShape{routed, h, f / t}};
  if (l.gated) out.push_back(GemmShape{routed, f / t, h});
  if (l.experts > 0) out.push_back(GemmShape{rows, l.experts, h});  // the router
  if (l.shared > 0) {  // the shared expert: an MLP of its own width over every token
    out.push_back(GemmShape{rows, l.shared / t, h});
    out.push_back(GemmShape{rows, h, l.shared / t});
    if (l.gated) out.push_back(GemmShape{rows, l.shared / t, h});
  }
  return out;
}

// The device the linear multiplies run on: in FP8 at its FP8 rate, each multiply's inputs cast
// first (read 2 bytes, write 1 twice per element: Hopper's FP8 tensor cores take only the TN
// layout, so the cast also writes the transpose the other multiply of the backward needs; the
// activation forward, the output gradient backward; the weights' casts are cached across
// micro-batches), with current scaling after a pass that finds their amax (2 more).
DeviceProfile multiplying(const DeviceProfile& d, const Software& software) {
  DeviceProfile fp8 = d;
  if (software.fp8) fp8.matmul_tflops = d.fp8_matmul_tflops;
  return fp8;
}
double fp8_casts(const std::vector<GemmShape>& multiplies, bool backward, const Software& software,
                 const DeviceProfile& d) {
  if (!software.fp8) return 0;
  double elements = 0;
  for (const GemmShape& g : multiplies) elements += g.m * (backward ? g.n : g.k);
  return memory_seconds((software.fp8_scaling == Fp8Scaling::current ? 6 : 4) * elements, d);
}

double linear_forward(const LayerShape& l, const DeviceProfile& d, const Software& software) {
  const DeviceProfile device = multiplying(d, software);
  const std::vector<GemmShape> multiplies = layer_multiplies(l);
  double seconds = 0;
  for (const GemmShape& g : multiplies) seconds += gemm_seconds(g, device);
  return seconds + fp8_casts(multiplies, false, software, d);
}

double linear_backward(const LayerShape& l, const DeviceProfile& d, const Software& software) {
  const DeviceProfile device = multiplying(d, software);
  const std::vector<GemmShape> multiplies = layer_multiplies(l);
  double seconds = 0;
  for (const GemmShape& g : multiplies)  // input, weight gradients
    seconds += gemm_seconds({g.m, g.k, g.n}, device) + gemm_seconds({g.k, g.n, g.m}, device);
  return seconds + fp8_casts(multiplies, true, software, d);
}

// What running the multiplies that tensor-parallel overlap cuts (all but the router) as t pieces
// of rows costs beyond running them whole, the forward's (`backward` false) or the input
// gradients' (true): a piece's rows fill their tiles less (the pieces of a ring follow one
// another on all the SMs, so waves are not counted: the library picks tiles that fill them).
double piece_cost(const LayerShape& l, const DeviceProfile& d, const Software& software, bool backward) {
  DeviceProfile device = multiplying(d, software);
  device.sms = 1;
  double extra = 0;
  for (const GemmShape& g : layer_multiplies(l)) {
    if (g.n == l.experts) continue;
    const GemmShape whole = backward ? GemmShape{g.m, g.k, g.n} : g;
    extra += l.t * gemm_seconds({whole.m / l.t, whole.n, whole.k}, device) - gemm_seconds(whole, device);
  }
  return extra;
}

// The share of a flash kernel's rate `kernel` reaches (core/plan/time_model.h's constants).
double kernel_share(AttentionKernel kernel) {
  return kernel == AttentionKernel::memory_efficient ? kMemoryEfficientShare : kernel == AttentionKernel::flash1 ? kFlash1Share : 1;
}

// TFLOP/s of attention blocks of `keys` keys at head size `head_dim`.
double attention_tflops(double keys, double head_dim, const DeviceProfile& d, AttentionKernel kernel) {
  return d.attention_tflops * attention_rate_share(keys, head_dim) * kernel_share(kernel);
}

// `d` with its memory bandwidth divided by how many 16-bit widths an element of `precision`
// has: the byte counts of this file are for 16-bit activations and weights.
DeviceProfile at_width(const DeviceProfile& d, Precision precision) {
  DeviceProfile wide = d;
  wide.memory_gbs /= precision == Precision::fp64 ? 4 : precision == Precision::fp32 ? 2 : 1;
  return wide;
}

// Attention forward and backward of one layer on `device` for `precision`: a fused kernel at its
// rate (causal: half the score blocks), or the unfused batched multiplies and the softmax through
// memory. Ring attention over r ranks does an equal share of the work at each of its r steps
// (load-balanced halves). Its blocks fused and merged eagerly, the r - 1 steps after the first
// cost kEagerRingStepShare more. Run by the plain multiplies (trident's ring), the blocks a query
// chunk sees, (2r + 1) / 4r of the scores (its own chunk's and the earlier ones' of 2r), are
// computed in fp32 (fp64 in an fp64 run): the multiplies at kFp32MultiplyShare of the 16-bit rate,
// the scores through memory pass by pass, 32 bytes each forward (the multiply writes them; the
// scale, the subtraction of the log-sum-exp and exp read and write them; the log-sum-exp reads
// them) and 52 backward (the same again to recompute the probabilities, the gradient of the
// probabilities written, the softmax's gradient in two passes reading three and writing two).
std::pair<double, double> attention(const LayerShape& l, const DeviceProfile& device, Precision precision,
                                    const Software& software) {
  const double heads = l.heads / l.t, batches = l.batch * heads, r = l.ring;
  const bool math_ring = r > 1 && software.ring_blocks == RingBlocks::math;
  if (software.fused_attention() && !math_ring) {
    const DeviceProfile d = at_width(device, precision);
    const double flops = 4 * l.batch * l.queries * l.keys * l.head_dim * heads / 2;
    const double merging = software.ring_blocks == RingBlocks::eager ? 1 + kEagerRingStepShare * (r - 1) / r : 1;
    const double forward =
        merging * flops / (attention_tflops(l.block_keys, l.head_dim, d, software.attention_kernel) * 1e12);
    return {forward, 2.5 * forward};
  }
  const double q = l.queries, hd = l.head_dim;
  if (math_ring) {
    // Byte counts at fp32's width (fp64's: twice them).
    DeviceProfile d = at_width(device, precision == Precision::fp64 ? Precision::fp64 : Precision::fp32);
    d.matmul_tflops *= kFp32MultiplyShare;
    const double k = l.keys * (2 * r + 1) / (4 * r), scores = batches * q * k;
    auto batched = [&](double m, double n, double k) { return gemm_seconds({m, n, k, batches}, d); };
    const double forward = batched(q, k, hd) + batched(q, hd, k) + memory_seconds(32 / 2 * scores, d);
    const double backward =
        2 * batched(q, k, hd) + batched(q, hd, k) + 2 * batched(k, hd, q) + memory_seconds(52 / 2 * scores, d);
    return {forward, backward};
  }
  const DeviceProfile d = at_width(device, precision);
  const double k = l.keys, scores = batches * q * k;
  auto batched = [&](double m, double n, double k) { return gemm_seconds({m, n, k, batches}, d); };
  // Scale-mask-softmax reads and writes the scores (4 bytes each); dropout reads and writes them
  // again and writes its mask (5). Backward: 6 and 5.
  const double dropout = l.attention_dropout ? 5 : 0;
  const double forward = batched(q, k, hd) + batched(q, hd, k) + memory_seconds((4 + dropout) * scores, d);
  // Gradients of QK^T (dQ, dK) and of PV (dP, dV).
  const double backward = batched(q, hd, k) + batched(k, hd, q) + batched(q, k, hd) + batched(k, hd, q) +
                          memory_seconds((6 + dropout) * scores, d);
  return {forward, backward};
}

// Bytes per element of T x h, 16-bit: two norms read and write (4 each; an eager RMSNorm 12: its
// fp32 square, mean and scale in passes of their own); two residual adds read two and write one
// (6 each), dropout writing its mask (1 more each); split over TP: the head reshapes (16), the
// activation per element of f: GELU reads and writes (4), SwiGLU's SiLU too and the product
// reads two and writes one (10; fused, read two and write one: 6); rotary reads and writes q
// and k (4 per element of (a + g) d; eager, through fp32 or complex halves: 12). `compile`: the
// fused counts.
double elementwise_forward(const LayerShape& l, const DeviceProfile& d, const Software& software) {
  const bool fused = software.compile;
  const double elements = l.tokens * l.hidden;
  const double norms = 2 * (l.rms && !fused ? 12 : 4);
  const double replicated = (norms + 12 + (l.hidden_dropout ? 2 : 0)) * elements / (l.sequence_parallel ? l.t : 1);
  const double activation = (l.gated ? (fused ? 6 : 10) : 4) * l.ffn * l.copies / l.hidden;
  const double rotary_width = (l.heads * l.head_dim + (l.qkv - l.heads * l.head_dim) / 2) / l.hidden;
  const double rotary = l.rotary ? (fused ? 4 : 12) * rotary_width : 0;
  const double split = (16 + activation + rotary) * elements / l.t;
  return memory_seconds(replicated + split, d);
}

// What recompute=selective re-runs in backward (core/plan/software.h's SelectiveRecompute): the
// attention core; the element-wise work and every other multiply (the attention output and the
// other multiplies' outputs kept); or one layer in n whole.
double selective_recompute_seconds(const Software& software, double forward, double linear, double attention,
                                   double elementwise) {
  switch (software.selective_recompute) {
    case SelectiveRecompute::attention: return attention;
    case SelectiveRecompute::op: return elementwise + linear / 2;
    case SelectiveRecompute::layers: return forward / double(software.recompute_layer_every);
  }
  return attention;
}

// One micro-batch through pipeline stage `stage`'s chunks: its layers, the embedding on the first,
// the logits and loss on the last.
StageWork stage_work(const ModelConfig& m, int64_t vocab, const Layout& layout, const DeviceProfile& device,
                     Precision precision, const Software& software, int64_t stage) {
  const bool first = stage == 0, last = stage == layout.head_rank();
  const DeviceProfile d = at_width(device, precision);
  const std::vector<int64_t> layers = stage_layer_indices(layout, m.num_layers, stage);
  const int64_t with_experts = std::count_if(layers.begin(), layers.end(), [&](int64_t i) { return m.moe_layer(i); });
  StageWork work{0, 0};
  for (const auto& [l, count] : layer_kinds(m, layout, int64_t(layers.size()), with_experts)) {
    const auto [attention_forward, attention_backward] = attention(l, device, precision, software);
    const double linear = linear_forward(l, d, software), elementwise = elementwise_forward(l, d, software);
    const double forward = linear + attention_forward + elementwise;
    double backward = linear_backward(l, d, software) + attention_backward + 2 * elementwise;
    if (layout.recompute == Recompute::full) backward += forward;
    if (layout.recompute == Recompute::selective) backward += selective_recompute_seconds(software, forward, linear, attention_forward, elementwise);
    work.forward += count * forward;
    work.backward += count * backward;
  }
  const double T = double(layout.micro_batch * (m.seq_length / layout.cp_size)), h = double(m.hidden_size),
               V = double(vocab) / double(layout.tp_size);
  if (last) {
    // The logits and softmax in fp32 (or fp64) whatever the model's width; fused, the logits in the
    // model's width read once forward and their gradient written in place backward.
    const double logits_bytes = software.fuses_cross_entropy(layout.tp_size)
                                    ? state_bytes(precision).weights * T * V
                                    : 12 * T * V * (precision == Precision::fp64 ? 2 : 1);
    work.forward += gemm_seconds({T, V, h}, d) + memory_seconds(logits_bytes, device);
    work.backward += gemm_seconds({T, h, V}, d) + gemm_seconds({h, V, T}, d) + memory_seconds(logits_bytes, device);
  }
  if (first) {
    work.forward += memory_seconds(3 * kHalf * T * h, d);  // token and position rows, their sum, dropout
    work.backward += memory_seconds(3 * kHalf * T * h, d);
  }
  return work;
}

// What `communication` seconds overlapped with `computation` seconds add to the time: what the
// computation cannot cover, and what the communication's SMs and memory traffic take from the
// computation while both run (`contention`: the profile's overlap_contention, or less for
// collectives that take no SMs, Software::registered_buffers).
double overlapped(double communication, double computation, double contention) {
  return std::max(0.0, communication - computation) + contention * std::min(communication, computation);
}

std::string line(const char* name, double seconds, const std::string& what) {
  char text[512];
  std::snprintf(text, sizeof text, "%-10s %10.4f s  %s", name, seconds, what.c_str());
  return text;
}

}  // namespace

double quantization_efficiency(const GemmShape& g, const DeviceProfile& d) {
  const double tiles_m = std::ceil(g.m / double(d.tile_m)), tiles_n = std::ceil(g.n / double(d.tile_n));
  const double tiles = g.batch * tiles_m * tiles_n;
  const double waves = std::ceil(tiles / double(d.sms));
  const double tile_share = g.m * g.n / (tiles_m * double(d.tile_m) * tiles_n * double(d.tile_n));
  const double wave_share = tiles / (waves * double(d.sms));
  // Dimensions the tensor cores cannot take whole cost what padding them would.
  const double k_share = g.k / ceil_to(g.k, double(d.alignment));
  return tile_share * wave_share * k_share;
}

double gemm_seconds(const GemmShape& g, const DeviceProfile& d) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return 0;
  const double compute = 2 * g.batch * g.m * g.n * g.k / quantization_efficiency(g, d) / (d.matmul_tflops * 1e12);
  const double bytes = kHalf * g.batch * (g.m * g.k + g.k * g.n + g.m * g.n);
  return std::max(compute, memory_seconds(bytes, d));
}

double memory_seconds(double bytes, const DeviceProfile& d) { return bytes / (d.memory_gbs * 1e9 * d.memory_efficiency); }

double attention_rate_share(double keys, double head_dim) {
  auto per_block = [](double s) { return s / (s + 512); };
  auto per_score = [](double d) { return d / (d + 20); };
  return per_block(keys) * per_score(head_dim) / per_score(128);
}

std::vector<std::string> efficiency_warnings(const Config& config, const Layout& layout, const DeviceProfile& d) {
  const ModelConfig& m = config.model;
  const double t = double(layout.tp_size), h = double(m.hidden_size);
  const double rows = double(layout.micro_batch * (m.seq_length / layout.cp_size));
  const double vocab = double(m.padded_vocab(layout.tp_size)) / t;
  const bool dense = m.moe_layers() < m.num_layers, experts = m.moe_layers() > 0;
  std::vector<std::string> out;
  // The forward multiplies of the layers against the same FLOPs unquantized.
  double actual = 0, ideal = 0;
  for (const auto& [shape, count] : layer_kinds(m, layout, m.num_layers, m.moe_layers()))
    for (const auto& g : layer_multiplies(shape)) {
      actual += count * 2 * g.m * g.n * g.k / quantization_efficiency(g, d);
      ideal += count * 2 * g.m * g.n * g.k;
    }
  const double lost = 1 - ideal / actual;
  if (lost > 0.05)
    out.push_back(str("a layer's multiplies lose ", int(100 * lost + 0.5), "% of their time to tile and wave quantization on ",
                      d.name, " (", d.tile_m, " x ", d.tile_n, " tiles, ", d.sms, " SMs): rows ", rows,
                      " (micro-batch x sequence), hidden ", h / t,
                      dense ? str(" and FFN ", double(m.ffn()) / t) : std::string(),
                      experts ? str(" and experts' FFN ", double(m.moe_ffn()) / t) : std::string(), " per TP rank"));
  auto aligned = [&](const char* what, double value) {
    const double a = double(d.alignment);
    if (std::fmod(value, a) != 0)
      out.push_back(str(what, " ", value, " is not a multiple of ", d.alignment,
                        ": tensor cores pad it, the multiplies it enters run up to ",
                        int(100 * (1 - value / (std::ceil(value / a) * a)) + 0.5), "% slower or fall back to slower kernels"));
  };
  aligned("hidden size per TP rank", h / t);
  if (dense) aligned("FFN size per TP rank", double(m.ffn()) / t);
  if (experts) aligned("experts' FFN size per TP rank", double(m.moe_ffn()) / t);
  aligned("head size", double(m.head_dim()));
  aligned("vocabulary per TP rank", vocab);
  aligned("micro-batch x sequence per CP rank", rows);
  const GemmShape logits{rows, vocab, h};
  if (quantization_efficiency(logits, d) < 0.9)
    out.push_back(str("the logits multiply (vocabulary ", vocab, " per TP rank) loses ",
                      int(100 * (1 - quantization_efficiency(logits, d)) + 0.5), "% to tile and wave quantization"));
  if (layout.pp_size > 1 && layout.micro_batches < 4 * layout.pp_size)
    out.push_back(str("global batch / (micro-batch x DP) = ", layout.micro_batches, " micro-batches for ", layout.pp_size,
                      " pipeline stages: the bubble of ", layout.schedule, " (on paper) costs ",
                      int(100.0 * schedule_shape(layout, {1, 1, 1}).bubble_stage_times /
                              double(layout.micro_batches) + 0.5),
                      "% of the compute (global batch close to micro-batch x DP starves the pipeline)"));
  return out;
}

std::string throughput_warning(double measured, double estimated, const std::string& device) {
  if (!(estimated > 0) || measured >= 0.5 * estimated) return "";
  return str("this run computes ", int(measured + 0.5), " TFLOP/s per GPU, under half the ", int(estimated + 0.5),
             " the time model (plan --explain) expects of this layout on ", device,
             ": something is wrong with the model or hardware configuration (GPU clocks or power, links, "
             "host stalls, data loading, shapes; see the efficiency warnings of train --dry-run)");
}

std::string throughput_expectation(double tokens_per_s, double tflops, const std::string& device) {
  return str("the time model (plan --explain) expects ", fixed(tokens_per_s, 0), " tokens/s and ", fixed(tflops, 1),
             " TFLOP/s (model) per GPU of this run's layout on ", device);
}

IterationTime estimate_iteration_time(const Config& config, const Layout& layout, const DeviceProfile& d,
                                      const Software& given) {
  const Software software = as_run(given, config.model, config.precision);
  const ModelConfig& m = config.model;
  const int64_t vocab = m.padded_vocab(layout.tp_size);
  IterationTime out;
  const double M = double(layout.micro_batches), p = double(layout.pp_size), v = double(layout.virtual_stages);
  const double intra = d.intra_node_gbs * d.link_efficiency, inter = d.inter_node_gbs * d.link_efficiency;

  const StateBytes bytes = state_bytes(config.precision);
  const double tokens = double(layout.micro_batch * (m.seq_length / layout.cp_size));
  const double block_keys = double(m.seq_length / layout.ring_size()), head_dim = double(m.head_dim());
  const double activation_bytes = bytes.weights * tokens * double(m.hidden_size);
  // What crosses a pipeline stage boundary: split over TP with sequence parallelism.
  const double boundary_bytes = activation_bytes / double(layout.sequence_parallel ? layout.tp_size : 1);
  // In all-reduces (an all-gather and a reduce-scatter count one): two per layer forward, two
  // backward, the forward's again with full recompute. SwiGLU's gate and up gather their input
  // each (with SP: half an all-reduce more forward, half more backward) or, without SP, each
  // reduce its gradient (one more backward). No stack runs that any more (trident's gate and up
  // share one gather, Megatron's are one multiply), and sequence parallelism's gathers again in
  // backward (Megatron's behind the multiplies, trident's exposed) are not counted: the
  // published runs the rates were set on are fitted with these counts (docs/planning.md).
  const bool gated = m.activation == Activation::swiglu, sp = layout.sequence_parallel;
  const double forward_calls = 2 + (gated && sp ? 0.5 : 0);
  const double backward_calls = 2 + (gated ? (sp ? 0.5 : 1) : 0);
  const bool full_recompute = layout.recompute == Recompute::full;
  const double tp_calls = forward_calls * (full_recompute ? 2 : 1) + backward_calls;
  // In FP8 the all-gathers (half the volume with sequence parallelism) move 1-byte values.
  const double tp_bytes = activation_bytes * (software.fp8 && sp ? 0.75 : 1);
  const double tp_layer = tp_calls * all_reduce_seconds(tp_bytes, layout.tp_size, intra);
  // Overlapped (it needs sequence parallelism: the collectives are the all-gathers and
  // reduce-scatters it cuts into pieces), a layer's collectives hide behind its multiplies but
  // for one piece in t each.
  const bool tp_overlapped = software.overlap_tensor_comm && sp;
  // Each overlapped collective is cut into t pieces, one of which has no multiply beside it; the
  // rest run beside the multiplies, which run as t pieces themselves.
  const DeviceProfile at_precision = at_width(d, config.precision);
  double multiplies = 0, pieces = 0;  // a layer's, the layers' mean
  for (const auto& [shape, count] : layer_kinds(m, layout, m.num_layers, m.moe_layers())) {
    multiplies += count * (linear_forward(shape, at_precision, software) * (full_recompute ? 2 : 1) +
                           linear_backward(shape, at_precision, software));
    pieces += count * (piece_cost(shape, at_precision, software, false) * (full_recompute ? 2 : 1) +
                       piece_cost(shape, at_precision, software, true));
  }
  multiplies /= double(m.num_layers);
  pieces /= double(m.num_layers);
  const double t = double(layout.tp_size);
  const double tp_exposed =
      tp_overlapped ? tp_layer / t + overlapped(tp_layer * (t - 1) / t, multiplies, d.overlap_contention) + pieces : tp_layer;

  // Context parallelism's two levels (Layout::context_grid): Ulysses within groups of u ranks,
  // ring attention across r = c / u of them; either may be one rank wide.
  double cp_layer = 0, cp_exposed = 0;
  const ProcessGrid context = layout.context_grid();
  auto bandwidth_over = [&](const char* axis) {
    return (context.extent({axis}) <= d.gpus_per_node ? intra : inter) * 1e9;
  };
  // Keys and values travel as the groups a rank holds: lcm(groups, u) of its heads, the groups
  // repeated until they deal out over Ulysses' u ranks (parallel/ulysses_attention.h); g / a of
  // the queries' size without Ulysses.
  const int64_t heads = m.num_attention_heads / layout.tp_size, groups = m.query_groups() / layout.tp_size;
  const double kv_fraction = double(std::lcm(groups, layout.ulysses_size)) / double(heads);
  const double rank_activation_bytes = activation_bytes / double(layout.tp_size);
  if (layout.ulysses_size > 1) {
    // Ulysses: q, k, v and the output cross in all-to-alls forward, their gradients backward, and
    // the forward's again when recomputation re-runs the attention core; each rank sends (u - 1) / u
    // of each, and waits for it (nothing overlaps them).
    const double u = double(layout.ulysses_size);
    const double pass_s = (2 + 2 * kv_fraction) * rank_activation_bytes * (u - 1) / u / bandwidth_over("ulysses");
    cp_layer = cp_exposed = pass_s * (layout.recompute == Recompute::none ? 2 : 3);
  }
  if (layout.ring_size() > 1) {
    // Ring attention: 3r - 2 block transfers per layer and micro-batch (the keys and values r - 1
    // times forward and r - 1 backward, their gradients r times), each hidden behind one block's
    // attention where it can be. After Ulysses a rank holds u times its tokens for 1 / u of the
    // heads: the same bytes, and blocks of s/r queries against s/r keys. PyTorch's eager ring
    // passes the keys and values repeated for every head and their gradients in fp32; trident's
    // (math) passes both in fp32.
    const double r = double(layout.ring_size());
    const double ring_kv =
        software.ring_blocks == RingBlocks::eager && !software.attention_keeps_groups ? 1 : kv_fraction;
    const double fp32 = std::max(1.0, 4 / bytes.weights);  // fp32's width against the run's
    const double kv_s = 2 * ring_kv * rank_activation_bytes / bandwidth_over("ring");
    const double kv_transfer_s = kv_s * (software.ring_blocks == RingBlocks::math ? fp32 : 1);
    const double gradient_transfer_s = kv_s * (software.ring_blocks == RingBlocks::fused ? 1 : fp32);
    // One block, unmasked (the diagonal blocks are the few).
    const double block_flops = 4 * tokens * double(m.seq_length / layout.ring_size()) * double(m.hidden_size) /
                               double(layout.tp_size);
    // Its multiplies' rate: the kernel's, or the plain multiplies' (in fp32 for trident's ring,
    // as attention() prices them).
    const double block_rate = software.ring_blocks == RingBlocks::math ? d.matmul_tflops * kFp32MultiplyShare
                              : software.fused_attention()
                                  ? attention_tflops(block_keys, head_dim, d, software.attention_kernel)
                                  : d.matmul_tflops;
    const double block_s = block_flops / (block_rate * 1e12);
    cp_layer += 2 * (r - 1) * kv_transfer_s + r * gradient_transfer_s;
    cp_exposed += 2 * (r - 1) * overlapped(kv_transfer_s, block_s, d.overlap_contention) +
                  r * overlapped(gradient_transfer_s, block_s, d.overlap_contention);
  }

  // Expert parallelism: a Mixture-of-Experts layer's k copies of each token a TP rank holds (all
  // of the TP group's tokens: the experts see them all) cross to the ranks of their experts and
  // back, forward and backward (and forward again with full recompute); each rank sends
  // (ep - 1) / ep of them and waits (parallel/expert_parallel.h), not overlapped with compute.
  // Counted as the layers' mean.
  double ep_layer = 0;
  if (layout.ep_size > 1 && m.moe_layers() > 0) {
    // A group over several nodes: the rows for peers in the node go over NVLink while those for
    // the other nodes go over the network, at once; the slower of the two sets the time.
    // The group's members are `stride` ranks apart: a node holds gpus_per_node / stride of them.
    const int64_t stride = layout.expert_grid().extent({"ep"}) / layout.ep_size;
    const double ep = double(layout.ep_size);
    const double per_node = double(std::clamp<int64_t>(d.gpus_per_node / stride, 1, layout.ep_size));
    const double rows_bytes = double(m.moe_router_topk) * activation_bytes;
    const double in_node = (per_node - 1) / ep, across = (ep - per_node) / ep;  // shares of the rows
    const double pass_s = std::max(rows_bytes * in_node / (intra * 1e9), rows_bytes * across / (inter * 1e9));
    ep_layer = pass_s * (full_recompute ? 6 : 4) * double(m.moe_layers()) / double(m.num_layers);
  }

  // The slowest stage sets the pace: the first (embedding), the last (logits and loss) or a middle
  // one, which holds more layers when the embedding and the loss count as layers; each with its
  // compute and its layers' tensor- and context-parallel communication.
  struct StageTime {
    int64_t stage = 0;
    StageWork work;
    double layers = 0;
    double compute() const { return work.forward + work.backward; }
  };
  StageTime slowest;
  double stage_mb = -1;
  for (int64_t stage : {int64_t(0), std::min<int64_t>(1, layout.pp_size - 1), layout.pp_size - 1}) {
    StageTime candidate{stage, stage_work(m, vocab, layout, d, config.precision, software, stage),
                        double(stage_layers(layout, m.num_layers, stage))};
    // Each micro-batch's 16-bit weight gradients added into the fp32 buffer in a pass of their own
    // (read 2 and 4, write 4): every parameter's, or with the fusion only the input embedding's
    // (a lookup's gradient) and the experts' (trident's grouped multiply does not fuse it;
    // Megatron's grouped linear can, so for it this is pessimistic); the norms' are too few.
    if (mixed(config.precision)) {
      const HeldParameters held = stage_held_parameters(m, vocab, layout, stage);
      const double added = software.fused_gradient_accumulation ? held.embedding + held.experts : held.total();
      candidate.work.backward += memory_seconds(10 * added, d);
    }
    const double seconds = candidate.compute() + candidate.layers * (tp_exposed + cp_exposed + ep_layer);
    if (seconds > stage_mb) slowest = candidate, stage_mb = seconds;
  }
  const StageWork& work = slowest.work;
  const double compute_mb = slowest.compute(), layers = slowest.layers;
  out.compute_s = M * compute_mb;
  out.tensor_comm_s = M * layers * tp_exposed;
  out.context_comm_s = M * layers * cp_exposed;
  out.expert_comm_s = M * layers * ep_layer;
  // The schedule on paper, with the slowest stage's forward and its backward halved into I and W.
  const ScheduleShape shape =
      schedule_shape(layout, {std::max(work.forward, 1e-12), work.backward / 2, work.backward / 2});
  out.bubble_s = shape.bubble_stage_times * stage_mb;

  double pp_total = 0;
  // Asynchronous transfers need other chunks' work to hide behind: the interleaved schedule's.
  const bool pp_overlapped = software.overlap_pipeline_comm && layout.virtual_stages > 1;
  if (layout.pp_size > 1) {
    const bool stages_inside_node = layout.world_size() <= d.gpus_per_node;
    const double transfer_s = boundary_bytes / ((stages_inside_node ? intra : inter) * 1e9);
    pp_total = 2 * (M * v + p - 1) * transfer_s;
    // Asynchronous, the transfers of the pipeline's fill and drain are all that waits.
    out.pipeline_comm_s = pp_overlapped ? 2 * (p - 1) * transfer_s : pp_total;
  }

  // Data parallelism over the data x context ranks, on the parameters of the busiest stage.
  const MemoryEstimate memory = estimate_memory(m, vocab, layout, config.precision, software);
  const ZeroSharding zero = layout.zero();
  const int64_t replicas = zero.replicas;
  // Across nodes NCCL drives every NIC of a node: a group with k members per node moves k links'
  // worth, up to what NVLink carries.
  const int64_t members_per_node =
      std::max<int64_t>(1, std::min<int64_t>(replicas, d.gpus_per_node / (layout.tp_size * layout.cp_size)));
  const double dp_gbs = layout.grid().extent({"cp", "dp"}) <= d.gpus_per_node
                            ? intra
                            : std::min(intra, inter * double(members_per_node));
  const double dp_contention = software.registered_buffers
                                   ? std::min(d.overlap_contention, 2 * dp_gbs / (d.memory_gbs * d.memory_efficiency))
                                   : d.overlap_contention;
  const double grads = bytes.grads * memory.parameters, weights = bytes.weights * memory.parameters;
  const double grad_bucket = std::min(grads, config.parallel.bucket_mb * double(1 << 20));
  const double weight_bucket = grad_bucket * bytes.weights / bytes.grads;
  // ZeRO-0 all-reduces the gradients, the sharded stages reduce-scatter them: once per
  // iteration, or after every micro-batch from ZeRO-2 on; overlapped, all but the last bucket
  // hide behind the backward, which ZeRO-3's backward weight gathers use too (trident
  // prefetches them: parallel/sharded_parameters.h).
  // Across nodes each step of a ring waits the network's latency (the profile's
  // collective_step_us): a reduce-scatter or all-gather over n ranks takes n - 1 steps, an
  // all-reduce twice that, once per block of the stage (FSDP's units; gradient buckets of about
  // a layer's size).
  const double step_s = layout.grid().extent({"cp", "dp"}) > d.gpus_per_node ? d.collective_step_us * 1e-6 : 0;
  const double dp_pieces = std::max(1.0, slowest.layers);
  auto latency = [&](double count, bool all_reduce) { return count * (all_reduce ? 2 : 1) * double(replicas - 1) * step_s; };
  auto reduce = [&](double b, double count) {
    return (!zero.reduce_scatters() ? all_reduce_seconds(b, replicas, dp_gbs) : half_collective_seconds(b, replicas, dp_gbs)) +
           latency(count, !zero.reduce_scatters());
  };
  // A pipeline stage kept gathered (keeps_stage_gathered) gathers once per iteration and reduces
  // after the last micro-batch.
  const bool kept_gathered = keeps_stage_gathered(layout, software);
  const double reductions = zero.shards_grads() && !kept_gathered ? M : 1;
  const double gather = half_collective_seconds(weights, replicas, dp_gbs) + latency(dp_pieces, false);
  double dp_total = 0;
  if (replicas > 1) {
    const double backward_gather = zero.shards_weights() && !kept_gathered ? gather : 0;
    const double reduction = reduce(grads, dp_pieces);
    dp_total = reductions * reduction;
    const double last_bucket = reduce(grad_bucket, 1);
    out.data_comm_s =
        software.overlap_gradient_reduction
            ? reductions * (last_bucket + overlapped(std::max(0.0, reduction + backward_gather - last_bucket),
                                                     work.backward, dp_contention))
            : dp_total + M * overlapped(backward_gather, work.backward, dp_contention);
    if (zero.shards_weights()) {
      // ZeRO-3: the weights gathered for every micro-batch's forward and backward (kept gathered:
      // the first forward's alone); the first block's forward gather has nothing before it to
      // hide behind.
      const double forward_gathers = kept_gathered ? 1 : M;
      dp_total += (kept_gathered ? 1 : 2 * M) * gather;
      const double first_block = gather / dp_pieces;
      out.data_comm_s +=
          forward_gathers * (first_block + overlapped(gather - first_block, work.forward, dp_contention));
    } else if (zero.reduce_scatters()) {
      // ZeRO-1 and 2: the updated weights gathered after the step, or behind the next first forward.
      dp_total += gather;
      const double first_bucket = half_collective_seconds(weight_bucket, replicas, dp_gbs) + latency(1, false);
      out.data_comm_s += software.overlap_weight_gather
                             ? first_bucket + overlapped(std::max(0.0, gather - first_bucket), work.forward, dp_contention)
                             : gather;
    }
  }

  // AdamW over the shard: gradient, main weight and moments read, written back, the 16-bit
  // weight written, the norm and the clipping's scale: 42 bytes per parameter.
  const double shard = memory.parameters / double(zero.shards());
  if (!layout.offload) out.optimizer_s = memory_seconds(42 * shard * (config.precision == Precision::fp64 ? 2 : 1), d);

  // Both parts rounded first, so that what is printed adds up.
  // An overlap whose cost (contention, the multiplies' pieces) exceeds the traffic it hides says so.
  auto overlap_split = [](double total, double exposed) {
    const double total_ms = std::round(total * 1e3), exposed_ms = std::round(exposed * 1e3);
    if (exposed_ms > total_ms)
      return str(": ", fixed(total_ms / 1e3, 3), " s in all, ", fixed(exposed_ms / 1e3, 3),
                 " exposed with what overlapping it takes from the computation");
    return str(": ", fixed(total_ms / 1e3, 3), " s in all, ", fixed((total_ms - exposed_ms) / 1e3, 3), " hidden, ",
               fixed(exposed_ms / 1e3, 3), " exposed");
  };
  const double gpus = double(layout.world_size());
  out.explanation = {
      line(
          "compute", out.compute_s,
          str("M = ", layout.micro_batches, " micro-batches x ", compute_mb * 1e3, " ms of forward ",
              work.forward * 1e3, " + backward ", work.backward * 1e3, " (recompute ", name(layout.recompute),
              ") on stage ", slowest.stage, " (", layers, " layers), the slowest, ", d.name, ": multiplies at ",
              d.matmul_tflops, " TFLOP/s with tile and wave quantization, memory at ",
              d.memory_gbs * d.memory_efficiency, " GB/s, attention ",
              layout.ring_size() > 1 && software.ring_blocks == RingBlocks::math
                  ? str("in ring blocks by the plain multiplies, the scores in fp32 (multiplies at ",
                        d.matmul_tflops * kFp32MultiplyShare, " TFLOP/s)")
              : software.fused_attention()
                  ? str(name(software.attention_kernel), " at ",
                        fixed(attention_tflops(block_keys, head_dim, d, software.attention_kernel), 1), " TFLOP/s (",
                        d.attention_tflops, " at long sequences)",
                        layout.ring_size() > 1 && software.ring_blocks == RingBlocks::eager
                            ? str(", each ring step after the first ", kEagerRingStepShare, " more (merged eagerly)")
                            : "")
                  : std::string("unfused"),
              software.fp8 ? str(", linear multiplies in FP8 at ", d.fp8_matmul_tflops, " TFLOP/s") : "",
              software.compile ? ", element-wise chains fused" : "",
              !mixed(config.precision)               ? ""
              : software.fused_gradient_accumulation ? ", the embedding's and experts' 16-bit gradients added into fp32"
                                                     : ", 16-bit gradients added into fp32 (10 B per parameter)")),
      line("bubble", out.bubble_s,
           str(fixed(shape.bubble_stage_times, 2), " stage times of ", stage_mb * 1e3, " ms (", layout.schedule,
               " on paper: 1F1B's p - 1 = ", p - 1, ", interleaved's (p - 1) / v)")),
      line("tp-comm", out.tensor_comm_s,
           str(tp_calls, " all-reduces per layer and micro-batch of ", binary_bytes(tp_bytes), " over TP ",
               layout.tp_size, " at ", intra, " GB/s, ",
               tp_overlapped ? "overlapped with the multiplies (one piece in t cannot hide)" : "not overlapped",
               overlap_split(M * layers * tp_layer, out.tensor_comm_s))),
      line("cp-comm", out.context_comm_s,
           str(layout.ulysses_size > 1
                   ? str("Ulysses' all-to-alls of q, k, v and the output, forward and backward, not overlapped",
                         layout.ring_size() > 1 ? str(", within groups of ", layout.ulysses_size, "; ") : "")
                   : "",
               layout.ring_size() > 1
                   ? str("ring attention's block transfers",
                         layout.ulysses_size > 1 ? str(" across ", layout.ring_size(), " groups") : "",
                         ", behind block attention where it is longer")
                   : "",
               layout.cp_size == 1 ? "no context parallelism"
                                   : overlap_split(M * layers * cp_layer, out.context_comm_s))),
      line("pp-comm", out.pipeline_comm_s,
           str("2 (M v + p - 1) transfers of ", binary_bytes(boundary_bytes), " between stages, ",
               pp_overlapped ? "asynchronous (the fill and drain wait)" : "waited for",
               overlap_split(pp_total, out.pipeline_comm_s))),
      line("dp-comm", out.data_comm_s,
           str("ZeRO-", layout.zero_stage, " over ", replicas, " replicas at ", dp_gbs, " GB/s: gradients ",
               software.overlap_gradient_reduction ? "reduced behind the backward but the last bucket"
                                                   : "reduced after the backward",
               zero.reduce_scatters() && !zero.shards_weights()
                   ? (software.overlap_weight_gather ? ", weights gathered behind the next forward"
                                                     : ", weights gathered after the step")
               : kept_gathered         ? ", weights gathered once per iteration, behind the first forward"
               : zero.shards_weights() ? ", weights gathered twice per micro-batch behind the compute"
                                       : "",
               overlap_split(dp_total, out.data_comm_s))),
      line("optimizer", out.optimizer_s,
           layout.offload ? std::string("on the host (offload)")
                          : str("42 bytes x ", si_units(shard), " parameters through memory")),
      line("total", out.seconds(), str(si_units(gpus), " GPUs, software ", software.name)),
  };
  // A model with experts says what expert parallelism costs, after the context's line.
  if (m.num_moe_experts > 0)
    out.explanation.insert(
        out.explanation.begin() + 4,
        line("ep-comm", out.expert_comm_s,
             layout.ep_size == 1 ? std::string("no expert parallelism")
                                 : str("all-to-alls of each token's ", m.moe_router_topk, " copies to the experts over EP ",
                                       layout.ep_size, " and back, forward and backward, in ", m.moe_layers(), " of ",
                                       m.num_layers, " layers, not overlapped")));
  return out;
}

}  // namespace trident
