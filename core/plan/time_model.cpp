#include "core/plan/time_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/plan/flops.h"
#include "core/plan/memory.h"
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
  bool gated;  // SwiGLU: gate and up multiplies
  bool sequence_parallel;
};

LayerShape layer_shape(const ModelConfig& m, const Layout& layout) {
  LayerShape l;
  l.batch = double(layout.micro_batch);
  l.queries = double(m.seq_length / layout.cp_size);
  l.keys = double(m.seq_length);
  l.tokens = l.batch * l.queries;
  l.hidden = double(m.hidden_size);
  l.qkv = double(m.qkv_rows());
  l.ffn = double(m.ffn());
  l.gated = m.activation == Activation::swiglu;
  l.heads = double(m.num_attention_heads);
  l.head_dim = double(m.head_dim());
  l.t = double(layout.tp_size);
  l.sequence_parallel = layout.sequence_parallel;
  return l;
}

// A layer's linear multiplies forward over its tokens on one TP rank: QKV (h x (a + 2g) d), the
// attention projection, the MLP's up (and SwiGLU's gate) and down.
std::vector<GemmShape> layer_multiplies(const LayerShape& l) {
  const double rows = l.tokens, h = l.hidden, f = l.ffn, t = l.t;
  std::vector<GemmShape> out = {GemmShape{rows, l.qkv / t, h}, GemmShape{rows, h, h / t}, GemmShape{rows, f / t, h},
                                GemmShape{rows, h, f / t}};
  if (l.gated) out.push_back(GemmShape{rows, f / t, h});
  return out;
}

double linear_forward(const LayerShape& l, const DeviceProfile& d) {
  double seconds = 0;
  for (const GemmShape& g : layer_multiplies(l)) seconds += gemm_seconds(g, d);
  return seconds;
}

double linear_backward(const LayerShape& l, const DeviceProfile& d) {
  double seconds = 0;
  for (const GemmShape& g : layer_multiplies(l))
    seconds += gemm_seconds({g.m, g.k, g.n}, d) + gemm_seconds({g.k, g.n, g.m}, d);  // input, weight gradients
  return seconds;
}

// Attention forward and backward of one layer: a fused kernel at its rate (causal: half the
// score blocks), or the unfused batched multiplies and the softmax through memory.
std::pair<double, double> attention(const LayerShape& l, const DeviceProfile& d, bool fused) {
  const double heads = l.heads / l.t, batches = l.batch * heads;
  if (fused) {
    const double flops = 4 * l.batch * l.queries * l.keys * l.head_dim * heads / 2;
    const double forward = flops / (d.attention_tflops * 1e12);
    return {forward, 2.5 * forward};
  }
  const double q = l.queries, k = l.keys, hd = l.head_dim;
  const double scores = batches * q * k;
  auto batched = [&](double m, double n, double k) { return gemm_seconds({m, n, k, batches}, d); };
  const double forward = batched(q, k, hd) + batched(q, hd, k) +
                         memory_seconds(9 * scores, d);  // scale-mask-softmax and dropout, with its mask
  // Gradients of QK^T (dQ, dK) and of PV (dP, dV).
  const double backward = batched(q, hd, k) + batched(k, hd, q) + batched(q, k, hd) + batched(k, hd, q) +
                          memory_seconds(11 * scores, d);
  return {forward, backward};
}

double elementwise_forward(const LayerShape& l, const DeviceProfile& d) {
  const double elements = l.tokens * l.hidden;
  const double replicated = 22 * elements / (l.sequence_parallel ? l.t : 1);  // LayerNorms, bias-dropout-adds
  const double split = 32 * elements / l.t;  // GELU on f = 4h with its bias, head reshapes
  return memory_seconds(replicated + split, d);
}

// `d` with its memory bandwidth divided by how many 16-bit widths an element of `precision`
// has: every byte count above is for 16-bit activations and weights.
DeviceProfile at_width(const DeviceProfile& d, Precision precision) {
  DeviceProfile wide = d;
  wide.memory_gbs /= precision == Precision::fp64 ? 4 : precision == Precision::fp32 ? 2 : 1;
  return wide;
}

StageWork stage_work(const ModelConfig& m, int64_t vocab, const Layout& layout, const DeviceProfile& device,
                     Precision precision, const Software& software, bool first, bool last) {
  const DeviceProfile d = at_width(device, precision);
  const LayerShape l = layer_shape(m, layout);

  const auto [attention_forward, attention_backward] = attention(l, d, software.fused_attention);
  const double forward = linear_forward(l, d) + attention_forward + elementwise_forward(l, d);
  double backward = linear_backward(l, d) + attention_backward + 2 * elementwise_forward(l, d);
  if (layout.recompute == Recompute::full) backward += forward;
  if (layout.recompute == Recompute::selective) backward += attention_forward;

  const double layers = double(m.num_layers / layout.pp_size);
  StageWork work{layers * forward, layers * backward};
  const double T = l.tokens, h = l.hidden, V = double(vocab) / l.t;
  if (last) {
    // The logits and softmax in fp32 (or fp64) whatever the model's width.
    const double logits_bytes = 12 * T * V * (precision == Precision::fp64 ? 2 : 1);
    work.forward += gemm_seconds({T, V, h}, d) + memory_seconds(logits_bytes, device);
    work.backward += gemm_seconds({T, h, V}, d) + gemm_seconds({h, V, T}, d) + memory_seconds(logits_bytes, device);
  }
  if (first) {
    work.forward += memory_seconds(3 * kHalf * T * h, d);  // token and position rows, their sum, dropout
    work.backward += memory_seconds(3 * kHalf * T * h, d);
  }
  return work;
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

std::vector<std::string> efficiency_warnings(const Config& config, const Layout& layout, const DeviceProfile& d) {
  const ModelConfig& m = config.model;
  const double t = double(layout.tp_size), h = double(m.hidden_size), f = double(m.ffn());
  const double rows = double(layout.micro_batch * (m.seq_length / layout.cp_size));
  const double vocab = double(m.padded_vocab(layout.tp_size)) / t;
  std::vector<std::string> out;
  // The forward multiplies of a layer against the same FLOPs unquantized.
  double actual = 0, ideal = 0;
  for (const auto& g : layer_multiplies(layer_shape(m, layout))) {
    actual += 2 * g.m * g.n * g.k / quantization_efficiency(g, d);
    ideal += 2 * g.m * g.n * g.k;
  }
  const double lost = 1 - ideal / actual;
  if (lost > 0.05)
    out.push_back(str("a layer's multiplies lose ", int(100 * lost + 0.5), "% of their time to tile and wave quantization on ",
                      d.name, " (", d.tile_m, " x ", d.tile_n, " tiles, ", d.sms, " SMs): rows ", rows,
                      " (micro-batch x sequence), hidden ", h / t, " and FFN ", f / t, " per TP rank"));
  auto aligned = [&](const char* what, double value) {
    const double a = double(d.alignment);
    if (std::fmod(value, a) != 0)
      out.push_back(str(what, " ", value, " is not a multiple of ", d.alignment,
                        ": tensor cores pad it, the multiplies it enters run up to ",
                        int(100 * (1 - value / (std::ceil(value / a) * a)) + 0.5), "% slower or fall back to slower kernels"));
  };
  aligned("hidden size per TP rank", h / t);
  aligned("FFN size per TP rank", f / t);
  aligned("head size", double(m.head_dim()));
  aligned("vocabulary per TP rank", vocab);
  aligned("micro-batch x sequence per CP rank", rows);
  const GemmShape logits{rows, vocab, h};
  if (quantization_efficiency(logits, d) < 0.9)
    out.push_back(str("the logits multiply (vocabulary ", vocab, " per TP rank) loses ",
                      int(100 * (1 - quantization_efficiency(logits, d)) + 0.5), "% to tile and wave quantization"));
  if (layout.pp_size > 1 && layout.micro_batches < 4 * layout.pp_size)
    out.push_back(str("global batch / (micro-batch x DP) = ", layout.micro_batches, " micro-batches for ", layout.pp_size,
                      " pipeline stages: the bubble (p-1)/(vM) costs ",
                      int(100.0 * double(layout.pp_size - 1) / double(layout.virtual_stages * layout.micro_batches) + 0.5),
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

IterationTime estimate_iteration_time(const Config& config, const Layout& layout, const DeviceProfile& d,
                                      const Links& links, const Software& software) {
  const ModelConfig& m = config.model;
  const int64_t vocab = m.padded_vocab(layout.tp_size);
  IterationTime out;
  const double M = double(layout.micro_batches), p = double(layout.pp_size), v = double(layout.virtual_stages);
  const double intra = links.intra_node_gbs * d.link_efficiency, inter = links.inter_node_gbs * d.link_efficiency;

  // The slower of the first and the last stage sets the pace (one stage holds both ends at p = 1).
  const bool one_stage = layout.pp_size == 1;
  const StageWork first = stage_work(m, vocab, layout, d, config.precision, software, true, one_stage);
  const StageWork last = stage_work(m, vocab, layout, d, config.precision, software, one_stage, true);
  StageWork work = first.forward + first.backward >= last.forward + last.backward ? first : last;
  // Each micro-batch's 16-bit weight gradients added into the fp32 buffer: read 2 and 4, write 4.
  const MemoryEstimate memory = estimate_memory(m, vocab, layout, config.precision);
  if (mixed(config.precision) && !software.fused_gradient_accumulation) work.backward += memory_seconds(10 * memory.parameters, d);
  const double compute_mb = work.forward + work.backward;

  const StateBytes bytes = state_bytes(config.precision);
  const double tokens = double(layout.micro_batch * (m.seq_length / layout.cp_size));
  const double activation_bytes = bytes.weights * tokens * double(m.hidden_size);
  // What crosses a pipeline stage boundary: split over TP with sequence parallelism.
  const double boundary_bytes = activation_bytes / double(layout.sequence_parallel ? layout.tp_size : 1);
  const double layers = double(m.num_layers / layout.pp_size);
  // In all-reduces (an all-gather and a reduce-scatter count one): two per layer forward, two
  // backward, the forward's again with full recompute. SwiGLU's gate and up gather their input
  // each (with SP: half an all-reduce more forward, half more backward) or, without SP, each
  // reduce its gradient (one more backward).
  const bool gated = m.activation == Activation::swiglu, sp = layout.sequence_parallel;
  const double forward_calls = 2 + (gated && sp ? 0.5 : 0);
  const double backward_calls = 2 + (gated ? (sp ? 0.5 : 1) : 0);
  const double tp_calls = forward_calls * (layout.recompute == Recompute::full ? 2 : 1) + backward_calls;
  const double tp_mb = tp_calls * layers * all_reduce_seconds(activation_bytes, layout.tp_size, intra);

  // Ring attention: 3c - 2 block transfers per layer and micro-batch, each hidden behind one
  // block's attention where it can be.
  double cp_mb = 0;
  if (layout.cp_size > 1) {
    const double c = double(layout.cp_size);
    const bool inside_node = layout.tp_size * layout.cp_size <= links.gpus_per_node;
    // Keys and values of the g key/value heads: g / a of the queries' size.
    const double kv_fraction = double(m.query_groups()) / double(m.num_attention_heads);
    const double transfer_s =
        2 * kv_fraction * activation_bytes / double(layout.tp_size) / ((inside_node ? intra : inter) * 1e9);
    // One block of s/c queries against s/c keys, unmasked (the diagonal blocks are the few).
    const double block_flops = 4 * tokens * double(m.seq_length / layout.cp_size) * double(m.hidden_size) /
                               double(layout.tp_size);
    const double block_s = software.fused_attention ? block_flops / (d.attention_tflops * 1e12)
                                                    : block_flops / (d.matmul_tflops * 1e12);
    cp_mb = (3 * c - 2) * std::max(0.0, transfer_s - block_s) * layers;
  }

  const double stage_mb = compute_mb + tp_mb + cp_mb;
  out.compute_s = M * compute_mb;
  out.tensor_comm_s = M * tp_mb;
  out.context_comm_s = M * cp_mb;
  out.bubble_s = (p - 1) / v * stage_mb;

  if (layout.pp_size > 1) {
    const bool stages_inside_node = layout.world_size() <= links.gpus_per_node;
    out.pipeline_comm_s = 2 * (M * v + p - 1) * boundary_bytes / ((stages_inside_node ? intra : inter) * 1e9);
  }

  // Data parallelism over the data x context ranks, on the parameters of the busiest stage.
  const ZeroSharding zero = layout.zero();
  const int64_t replicas = zero.replicas;
  // Across nodes NCCL drives every NIC of a node: a group with k members per node moves k links'
  // worth, up to what NVLink carries.
  const int64_t members_per_node =
      std::max<int64_t>(1, std::min<int64_t>(replicas, links.gpus_per_node / (layout.tp_size * layout.cp_size)));
  const double dp_gbs = layout.tp_size * replicas <= links.gpus_per_node ? intra
                                                                        : std::min(intra, inter * double(members_per_node));
  const double grads = bytes.grads * memory.parameters, weights = bytes.weights * memory.parameters;
  const double bucket = std::min(grads, config.parallel.bucket_mb * double(1 << 20));
  auto overlapped = [&](double total_s, double window_s, double last_s) {
    return software.overlap_gradient_reduction ? std::max(total_s - window_s, last_s) : total_s;
  };
  // ZeRO-0 all-reduces the gradients, the sharded stages reduce-scatter them: once per
  // iteration, or after every micro-batch from ZeRO-2 on.
  auto reduce = [&](double b) {
    return !zero.reduce_scatters() ? all_reduce_seconds(b, replicas, dp_gbs) : half_collective_seconds(b, replicas, dp_gbs);
  };
  const double reductions = zero.shards_grads() ? M : 1;
  out.data_comm_s = replicas > 1 ? reductions * overlapped(reduce(grads), work.backward, reduce(bucket)) : 0;
  if (zero.reduce_scatters() && !zero.shards_weights()) out.data_comm_s += half_collective_seconds(weights, replicas, dp_gbs);
  if (zero.shards_weights()) {
    const double gather = half_collective_seconds(weights, replicas, dp_gbs);
    out.data_comm_s += M * (std::max(0.0, gather - work.forward) + std::max(0.0, gather - work.backward));
  }

  // AdamW over the shard: gradient, main weight and moments read, written back, the 16-bit
  // weight written, the norm and the clipping's scale: 42 bytes per parameter.
  const double shard = memory.parameters / double(zero.shards());
  if (!layout.offload) out.optimizer_s = memory_seconds(42 * shard * (config.precision == Precision::fp64 ? 2 : 1), d);

  const double gpus = double(layout.world_size());
  out.explanation = {
      line("compute", out.compute_s,
           str("M = ", layout.micro_batches, " micro-batches x ", compute_mb * 1e3, " ms of forward ", work.forward * 1e3,
               " + backward ", work.backward * 1e3, " (recompute ", name(layout.recompute), ") on the slowest stage, ",
               d.name, ": multiplies at ", d.matmul_tflops, " TFLOP/s with tile and wave quantization, memory at ",
               d.memory_gbs * d.memory_efficiency, " GB/s, attention ",
               software.fused_attention ? str("fused at ", d.attention_tflops, " TFLOP/s") : std::string("unfused"))),
      line("bubble", out.bubble_s, str("(p - 1) / v = ", (p - 1) / v, " stage times of ", stage_mb * 1e3, " ms")),
      line("tp-comm", out.tensor_comm_s,
           str(tp_calls, " all-reduces per layer and micro-batch of ", binary_bytes(activation_bytes), " over TP ",
               layout.tp_size, " at ", intra, " GB/s, not overlapped")),
      line("cp-comm", out.context_comm_s, "ring attention's block transfers that its block computations do not hide"),
      line("pp-comm", out.pipeline_comm_s,
           str("2 (M v + p - 1) transfers of ", binary_bytes(boundary_bytes), " between stages")),
      line("dp-comm", out.data_comm_s,
           str("ZeRO-", layout.zero_stage, " over ", replicas, " replicas at ", dp_gbs,
               " GB/s: what the last backward does not hide (at least the last bucket), plus the weights' all-gathers")),
      line("optimizer", out.optimizer_s,
           layout.offload ? std::string("on the host (offload)") : str("42 bytes x ", si_units(shard), " parameters through memory")),
      line("total", out.seconds(), str(si_units(gpus), " GPUs")),
  };
  return out;
}

}  // namespace trident
