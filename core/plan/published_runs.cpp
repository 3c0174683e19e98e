#include "core/plan/published_runs.h"

#include <map>
#include <tuple>

#include "core/error.h"
#include "core/text.h"

namespace trident {
namespace {

using Overrides = std::vector<std::string>;

Overrides joined(Overrides a, const Overrides& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A Llama-shaped decoder: RMSNorm, RoPE, SwiGLU, no biases, untied output, no dropout, bf16.
Overrides llama(int64_t layers, int64_t hidden, int64_t heads, int64_t groups, int64_t ffn, int64_t vocab, int64_t seq) {
  return {str("model.num_layers=", layers), str("model.hidden_size=", hidden), str("model.num_attention_heads=", heads),
          str("model.num_query_groups=", groups), str("model.ffn_hidden_size=", ffn), str("model.vocab_size=", vocab),
          str("model.seq_length=", seq), "model.normalization=rmsnorm", "model.position_embedding_type=rope",
          "model.activation=swiglu", "model.add_bias_linear=false", "model.untie_embeddings_and_output_weights=true",
          "model.hidden_dropout=0", "model.attention_dropout=0", "precision=bf16", "data.type=synthetic"};
}
// Llama 3.1's shapes (torchtitan's model arguments; Dubey et al. 2024, Table 3): 8 key/value
// groups, vocabulary 128256.
Overrides llama3(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn, int64_t seq) {
  return llama(layers, hidden, heads, 8, ffn, 128256, seq);
}
// Llama 2's (Touvron et al. 2023): vocabulary 32000, sequences of 4096.
Overrides llama2(int64_t layers, int64_t hidden, int64_t heads, int64_t groups, int64_t ffn) {
  return llama(layers, hidden, heads, groups, ffn, 32000, 4096);
}
// GPT-3's (Brown et al. 2020) as NeMo trains them: learned positions, LayerNorm, GELU MLP of 4 h
// with biases, tied embeddings, vocabulary 51200, sequences of 2048.
Overrides gpt3(int64_t layers, int64_t hidden, int64_t heads) {
  return {str("model.num_layers=", layers), str("model.hidden_size=", hidden), str("model.num_attention_heads=", heads),
          "model.seq_length=2048", "model.vocab_size=51200", "model.hidden_dropout=0", "model.attention_dropout=0",
          "precision=bf16", "data.type=synthetic"};
}
Overrides llama3_8b(int64_t seq) { return llama3(32, 4096, 32, 14336, seq); }
Overrides llama3_70b(int64_t seq) { return llama3(80, 8192, 64, 28672, seq); }
Overrides llama3_405b(int64_t seq) { return llama3(126, 16384, 128, 53248, seq); }

// A run's layout: TP, CP, PP (1F1B; interleaved with `chunks` > 1), the data-parallel ZeRO
// stage (FSDP's full sharding is ZeRO-3), micro-batch, global batch and recompute.
Overrides layout(int64_t tp, int64_t cp, int64_t pp, int64_t zero, int64_t micro, int64_t global, const char* recompute,
                 int64_t chunks = 1) {
  Overrides out = {str("parallel.tensor=", tp), str("parallel.context=", cp), str("parallel.pipeline=", pp),
                   str("parallel.zero_stage=", zero), str("batch.micro_batch_size=", micro),
                   str("batch.global_batch_size=", global), str("recompute=", recompute),
                   str("parallel.sequence_parallel=", tp > 1 ? "true" : "false")};
  if (chunks > 1) out = joined(out, {"parallel.schedule=interleaved_1f1b", str("parallel.virtual_stages=", chunks)});
  return out;
}

PublishedRun run(std::string stack, std::string id, std::string source, DeviceProfile device, int64_t gpus,
                 const Overrides& config, Software software, double tokens_per_s_per_gpu, double peak_memory_gib = 0,
                 std::string calibrates = "") {
  PublishedRun r;
  r.stack = std::move(stack);
  r.id = std::move(id);
  r.source = std::move(source);
  r.device = std::move(device);
  r.gpus = gpus;
  r.config = Config::parse("", config);
  r.software = std::move(software);
  r.tokens_per_s_per_gpu = tokens_per_s_per_gpu;
  r.peak_memory_gib = peak_memory_gib;
  r.calibrates = std::move(calibrates);
  return r;
}

// ---- torchtitan: benchmarks/llama3_h100_202412_torchtitan.md (Dec 2024, "A") and
// benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (June 2025, "B"), pytorch/torchtitan. ----
void torchtitan_runs(std::vector<PublishedRun>& out) {
  const char* a = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md";
  const char* b = "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md";
  const DeviceProfile h100 = h100_hbm2e_profile();
  auto titan = [](Overrides settings) { return software_with("torchtitan", settings); };
  // From 2025 torchtitan compiles the loss with the model (torchtitan/components/loss.py): the
  // upcast to fp32 and the cross-entropy in one kernel, the 16-bit logits kept; counted so where
  // a rank holds the whole vocabulary (with TP, loss_parallel's vocabulary-parallel loss through
  // DTensor, counted in fp32 as before).
  auto titan_2025 = [](Overrides settings) {
    return software_with("torchtitan", joined(settings, {"cross_entropy=fused_whole_vocabulary"}));
  };
  const Overrides compiled = {"compile=true"}, fp8 = {"compile=true", "fp8=true"};
  const Overrides async = {"compile=true", "overlap_tensor_comm=true"}, async_fp8 = {"compile=true", "fp8=true", "overlap_tensor_comm=true"};
  // Table 1: 8B on 8 GPUs, FSDP, local batch 2, selective (per-op) recompute.
  const Overrides fsdp8 = joined(llama3_8b(8192), layout(1, 1, 1, 3, 2, 16, "selective"));
  out.push_back(run("torchtitan", "8B FSDP 8", a, h100, 8, fsdp8, titan({}), 5762, 82.4));
  out.push_back(run("torchtitan", "8B FSDP 8 compile", a, h100, 8, fsdp8, titan(compiled), 6667, 77.0,
                    "the H100 HBM2e clock share"));
  out.push_back(run("torchtitan", "8B FSDP 8 compile fp8", a, h100, 8, fsdp8, titan(fp8), 8532, 76.8));
  // Table 2: 8B on 8 GPUs, FSDP x CP, local batch 1, full recompute, compile and Float8. CP 8
  // sets what an eagerly merged ring step costs (kEagerRingStepShare).
  for (const auto& [cp, seq, tps, memory] : std::vector<std::tuple<int64_t, int64_t, double, double>>{
           {1, 32768, 3890.0, 83.9}, {2, 65536, 2540.0, 84.2}, {4, 131072, 1071.0, 84.0}, {8, 262144, 548.0, 84.5}})
    out.push_back(run("torchtitan", str("8B FSDP ", 8 / cp, " x CP ", cp, " seq ", seq), a, h100, 8,
                      joined(llama3_8b(seq), layout(1, cp, 1, 3, 1, 8 / cp, "full")), titan(fp8), tps, memory,
                      cp == 8 ? "torchtitan's eager ring step share" : ""));
  // Table 3: 8B on 128 GPUs, FSDP, local batch 2.
  const Overrides fsdp128 = joined(llama3_8b(8192), layout(1, 1, 1, 3, 2, 256, "selective"));
  out.push_back(run("torchtitan", "8B FSDP 128", a, h100, 128, fsdp128, titan({}), 5605, 67.0));
  out.push_back(run("torchtitan", "8B FSDP 128 compile", a, h100, 128, fsdp128, titan(compiled), 6514, 62.0));
  out.push_back(run("torchtitan", "8B FSDP 128 compile fp8", a, h100, 128, fsdp128, titan(fp8), 8380, 61.8));
  // Table 6: 405B on 512 GPUs, FSDP x CP x TP 8 x PP 8 (1F1B), local batch 8, full recompute,
  // compile, Float8 and async TP. torchtitan cuts a pipeline's batch into as many micro-batches
  // as it has stages unless told otherwise (experimental.pipeline_parallel_microbatches): 8 of 1;
  // its 126 layers split as Llama 3's are, the embedding and the loss a layer's slot each.
  for (const auto& [cp, seq, tps, memory] : std::vector<std::tuple<int64_t, int64_t, double, double>>{
           {1, 32768, 76.0, 75.3}, {2, 65536, 47.0, 75.9}, {4, 131072, 31.0, 77.1}, {8, 262144, 16.0, 84.9}})
    out.push_back(run("torchtitan", str("405B FSDP ", 8 / cp, " x CP ", cp, " x TP 8 x PP 8 seq ", seq), a, h100, 512,
                      joined(joined(llama3_405b(seq), layout(8, cp, 8, 3, 1, 8 * (8 / cp), "full")),
                             {"parallel.embedding_and_loss_as_layers=true"}),
                      titan(async_fp8), tps, memory));
  // Table 4 and B: 70B on 256 GPUs, FSDP 32 x TP 8, local batch 16, full recompute.
  const Overrides tp70 = joined(llama3_70b(8192), layout(8, 1, 1, 3, 16, 512, "full"));
  out.push_back(run("torchtitan", "70B FSDP 32 x TP 8 fp8", a, h100, 256, tp70, titan(fp8), 829, 71.9));
  out.push_back(run("torchtitan", "70B FSDP 32 x TP 8 fp8 async TP", a, h100, 256, tp70, titan(async_fp8), 876, 67.6));
  out.push_back(run("torchtitan", "70B FSDP 32 x TP 8 (2025)", b, h100, 256, tp70, titan_2025(compiled), 597.3));
  out.push_back(run("torchtitan", "70B FSDP 32 x TP 8 async TP (2025)", b, h100, 256, tp70, titan_2025(async), 652.4, 0,
                    "H100 overlap_contention (async TP's gain over the row above)"));
  out.push_back(run("torchtitan", "70B FSDP 32 x TP 8 fp8 (2025)", b, h100, 256, tp70, titan_2025(fp8), 809.8));
  out.push_back(
      run("torchtitan", "70B FSDP 32 x TP 8 fp8 async TP (2025)", b, h100, 256, tp70, titan_2025(async_fp8), 942.4));
  // B: 8B on 64 GPUs, FSDP 8 x TP 8, local batch 12, per-op recompute.
  const Overrides tp8 = joined(llama3_8b(8192), layout(8, 1, 1, 3, 12, 96, "selective"));
  out.push_back(run("torchtitan", "8B FSDP 8 x TP 8 (2025)", b, h100, 64, tp8, titan_2025(compiled), 4378));
  out.push_back(run("torchtitan", "8B FSDP 8 x TP 8 async TP (2025)", b, h100, 64, tp8, titan_2025(async), 4809.4));
  out.push_back(run("torchtitan", "8B FSDP 8 x TP 8 fp8 (2025)", b, h100, 64, tp8, titan_2025(fp8), 5078.1));
  out.push_back(
      run("torchtitan", "8B FSDP 8 x TP 8 fp8 async TP (2025)", b, h100, 64, tp8, titan_2025(async_fp8), 5570.1));
  // C: Trainy's 8B runs on H200s (June 2025): FSDP over 32 and 64 GPUs, local batch 2, the
  // default per-op recompute, compile and Float8 (its weights gathered in FP8: counted 16-bit).
  const char* c = "pytorch/torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md";
  for (const auto& [gpus, tps, memory] :
       std::vector<std::tuple<int64_t, double, double>>{{32, 10938.0, 47.96}, {64, 10753.0, 46.97}})
    out.push_back(run("torchtitan", str("8B FSDP ", gpus, " compile fp8 on H200 (2025)"), c, h200_profile(), gpus,
                      joined(llama3_8b(8192), layout(1, 1, 1, 3, 2, 2 * gpus, "selective")), titan_2025(fp8), tps,
                      memory));
}

// ---- trident's own runs on one H200 (docs/gpu.md), scripts/gpu_report's two rows: configs/gpt1.7b.yaml
// (dropout 0.1) at micro-batch 8, global 32, and configs/llama3-8b.yaml cut to 6 layers at
// micro-batch 1, global 8, both without recomputation; trident's tokens/s the mean of
// iterations 2-3, its memory the allocator's allocated peak. Before gradient-accumulation
// fusion (2026-11-29), so without it. ----
void trident_runs(std::vector<PublishedRun>& out) {
  const char* source = "docs/gpu.md (trident)";
  const DeviceProfile h200 = h200_profile();
  const Software before_fusion = software_with("trident", {"fused_gradient_accumulation=false"});
  const Overrides gpt = {"model.num_layers=24",         "model.hidden_size=2304", "model.num_attention_heads=24",
                         "model.seq_length=2048",       "model.vocab_size=51200", "model.hidden_dropout=0.1",
                         "model.attention_dropout=0.1", "precision=bf16",         "data.type=synthetic"};
  const Overrides gpt_row = joined(gpt, layout(1, 1, 1, 0, 8, 32, "none"));
  const Overrides llama_row = joined(joined(llama3_8b(8192), {"model.num_layers=6"}), layout(1, 1, 1, 0, 1, 8, "none"));
  out.push_back(
      run("trident", "1.7B fused kernels (2026-11-27)", source, h200, 1, gpt_row, before_fusion, 44500, 59.8));
  out.push_back(run("trident", "Llama 3 8B x 6 fused kernels (2026-11-27)", source, h200, 1, llama_row, before_fusion,
                    44700, 51.0));
  out.push_back(run("trident", "Llama 3 8B x 6 fp8 (2026-11-27)", source, h200, 1, joined(llama_row, {"precision=fp8"}),
                    before_fusion, 51400, 50.0));
  out.push_back(run("trident", "Llama 3 8B x 6 composite (2026-11-26)", source, h200, 1,
                    joined(llama_row, {"model.fused_kernels=false"}), before_fusion, 38500, 59.8));
}

// ---- Megatron-Core in NVIDIA's stacks, FP8 on H100 80GB SXM (DGX H100): NeMo's performance
// summary of 24.07 (NVIDIA/NeMo docs/source/performance/performance_summary.md, "N") and 25.02
// (docs.nvidia.com), Megatron-Bridge's (NVIDIA-NeMo/Megatron-Bridge
// docs/performance-summary-archive.md, "B"). The distributed optimizer (ZeRO-1) with its
// gradient reduction and weight gathers overlapped, sequence parallelism, no recomputation. ----
void megatron_runs(std::vector<PublishedRun>& out) {
  const char* nemo = "NVIDIA/NeMo docs/source/performance/performance_summary.md (24.07)";
  const char* bridge = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md";
  const DeviceProfile h100 = h100_profile();
  auto core = [](Overrides settings) { return software_with("megatron-core", joined({"fp8=true"}, settings)); };
  // Megatron-Bridge's recipes fuse the loss into Transformer Engine's cross-entropy; from 25.11
  // its FP8 is current scaling (25.09's does not say).
  const Overrides bridge_loss = {"cross_entropy=fused"};
  const Overrides current = {"cross_entropy=fused", "fp8_scaling=current"};
  const Overrides no_tp_overlap = {"overlap_tensor_comm=false"};
  const Overrides as_layers = {"parallel.embedding_and_loss_as_layers=true"};
  out.push_back(run("megatron-core", "N11 Llama 3 8B CP 2", nemo, h100, 8,
                    joined(llama3_8b(8192), layout(1, 2, 1, 1, 1, 128, "none")), core({}), 12273, 0,
                    "H100 fp8_matmul_tflops"));
  out.push_back(run("megatron-core", "N12 Llama 3 70B TP 4 CP 2 PP 4 VP 5", nemo, h100, 64,
                    joined(llama3_70b(8192), layout(4, 2, 4, 1, 1, 128, "none", 5)), core({}), 1524));
  out.push_back(run("megatron-core", "B01 Llama 3 8B FSDP 8 (25.09)", bridge, h100, 8,
                    joined(llama3_8b(8192), layout(1, 1, 1, 3, 1, 128, "none")),
                    core(joined(bridge_loss, {"fused_gradient_accumulation=false", "registered_buffers=true"})),
                    14079));
  for (const auto& [id, global, tps] : std::vector<std::tuple<const char*, int64_t, double>>{
           {"B05 Llama 3 70B TP 4 PP 8 VP 5 (25.11)", 128, 1602.0}, {"B10 Llama 3 70B TP 4 PP 8 VP 5 (26.04)", 256, 1633.0}})
    out.push_back(run("megatron-core", id, bridge, h100, 64,
                      joined(llama3_70b(8192), layout(4, 1, 8, 1, 1, global, "none", 5)), core(current), tps));
  for (const auto& [id, global, tps] : std::vector<std::tuple<const char*, int64_t, double>>{
           {"B06 Llama 3.1 405B TP 8 CP 2 PP 8 VP 8 (25.11)", 512, 292.0},
           {"B13 Llama 3.1 405B TP 8 CP 2 PP 8 VP 8 (26.06)", 1536, 326.0}})
    out.push_back(run("megatron-core", id, bridge, h100, 1024,
                      joined(joined(llama3_405b(8192), layout(8, 2, 8, 1, 1, global, "none", 8)), as_layers),
                      core(current), tps));
  out.push_back(run("megatron-core", "N05 Llama 2 7B", nemo, h100, 8,
                    joined(llama2(32, 4096, 32, 32, 11008), layout(1, 1, 1, 1, 1, 128, "none")), core({}), 16934));
  out.push_back(run("megatron-core", "N06 Llama 2 13B PP 4 VP 10", nemo, h100, 16,
                    joined(llama2(40, 5120, 40, 40, 13824), layout(1, 1, 4, 1, 1, 128, "none", 10)), core({}), 8715));
  out.push_back(run("megatron-core", "N07 Llama 2 70B TP 4 PP 4 VP 20", nemo, h100, 64,
                    joined(llama2(80, 8192, 64, 8, 28672), layout(4, 1, 4, 1, 1, 128, "none", 20)), core({}), 1728));
  out.push_back(run("megatron-core", "N01 GPT-3 5B", nemo, h100, 64,
                    joined(gpt3(24, 4096, 32), layout(1, 1, 1, 1, 4, 2048, "none")), core({}), 23406));
  out.push_back(run("megatron-core", "N02 GPT-3 20B TP 2", nemo, h100, 64,
                    joined(gpt3(44, 6144, 48), layout(2, 1, 1, 1, 2, 256, "none")), core(no_tp_overlap), 5851));
  out.push_back(run("megatron-core", "N03 GPT-3 175B TP 4 PP 8 VP 6", nemo, h100, 128,
                    joined(gpt3(96, 12288, 96), layout(4, 1, 8, 1, 1, 256, "none", 6)), core(no_tp_overlap), 716));
  out.push_back(run("megatron-core", "N19 GPT-3 175B TP 4 PP 8 VP 6 (25.02)",
                    "NeMo performance summary 25.02 (docs.nvidia.com)", h100, 512,
                    joined(gpt3(96, 12288, 96), layout(4, 1, 8, 1, 2, 2048, "none", 6)), core(no_tp_overlap), 866));
}

// ---- MosaicML llm-foundry: scripts/train/benchmarking/README.md (mosaicml/llm-foundry at
// 8c8dd48), MPT models on H100 80GB: FSDP (FULL_SHARD, SHARD_GRAD_OP for the large-scale 1b
// and 3b rows) in bf16 with fp32 reduction, whole-block checkpointing or none. The large-scale
// rows ("LS", January 2024) ran FlashAttention-2; the others (October 2023) llm-foundry's Triton
// flash kernel in bf16 and FlashAttention 1.0.7 with Transformer Engine's FP8 layers. ----
struct FoundryRow {
  const char* id;
  const char* model;
  int64_t gpus, seq, micro, global;
  bool checkpointing;
  int64_t zero;
  bool fp8;
  double tokens_per_s_per_gpu;
};

// MPT's benchmark shapes (scripts/train/yamls/pretrain/mpt-*.yaml): learned positions, LayerNorm
// with biases, GELU MLP of 4 d, tied embeddings, vocabulary 50368, no dropout.
Overrides mpt(const std::string& size, int64_t seq) {
  struct Shape {
    const char* size;
    int64_t hidden, heads, layers;
  };
  static const Shape shapes[] = {{"760m", 1536, 12, 24}, {"1b", 2048, 16, 24}, {"3b", 2560, 20, 32}, {"7b", 4096, 32, 32},
                                 {"13b", 5120, 40, 40},  {"30b", 7168, 56, 48}, {"70b", 8192, 64, 80}};
  for (const Shape& s : shapes)
    if (size == s.size)
      return {str("model.num_layers=", s.layers), str("model.hidden_size=", s.hidden),
              str("model.num_attention_heads=", s.heads), str("model.seq_length=", seq), "model.vocab_size=50368",
              "model.hidden_dropout=0", "model.attention_dropout=0", "precision=bf16", "data.type=synthetic"};
  fail("llm-foundry run of an MPT size with no shape here: '", size, "'");
}

void llm_foundry_runs(std::vector<PublishedRun>& out) {
  static const FoundryRow rows[] = {
      {"LS-01", "70b", 512, 2048, 8, 4096, true, 3, false, 1007.1},
      {"LS-02", "70b", 256, 2048, 8, 2048, true, 3, false, 1035.7},
      {"LS-03", "70b", 128, 2048, 8, 1024, true, 3, false, 1058.5},
      {"LS-04", "30b", 512, 2048, 8, 4096, true, 3, false, 2115.9},
      {"LS-05", "30b", 256, 2048, 8, 2048, true, 3, false, 2148.5},
      {"LS-06", "30b", 128, 2048, 8, 1024, true, 3, false, 2199.1},
      {"LS-07", "13b", 512, 2048, 16, 8192, true, 3, false, 4952.8},
      {"LS-08", "13b", 256, 2048, 16, 4096, true, 3, false, 4989.1},
      {"LS-09", "13b", 128, 2048, 16, 2048, true, 3, false, 5080.2},
      {"LS-10", "7b", 512, 2048, 6, 3072, false, 3, false, 9670.9},
      {"LS-11", "7b", 256, 2048, 6, 1536, false, 3, false, 10119.3},
      {"LS-12", "7b", 128, 2048, 6, 768, false, 3, false, 10475.2},
      {"LS-13", "3b", 512, 2048, 8, 4096, false, 2, false, 21664.5},
      {"LS-14", "3b", 256, 2048, 8, 2048, false, 2, false, 22772.2},
      {"LS-15", "3b", 128, 2048, 8, 1024, false, 2, false, 23422.6},
      {"LS-16", "1b", 512, 2048, 12, 6144, false, 2, false, 39837.7},
      {"LS-17", "1b", 256, 2048, 12, 3072, false, 2, false, 42555.5},
      {"LS-18", "1b", 128, 2048, 12, 1536, false, 2, false, 44123.9},
      {"BF-01", "70b", 64, 2048, 8, 2048, true, 3, false, 1039.4},
      {"BF-02", "70b", 32, 2048, 2, 1024, true, 3, false, 882.6},
      {"BF-03", "30b", 8, 8192, 1, 168, true, 3, false, 1384.0},
      {"BF-04", "30b", 8, 4096, 1, 168, true, 3, false, 1802.4},
      {"BF-05", "30b", 32, 2048, 14, 1344, true, 3, false, 2308.1},
      {"BF-06", "30b", 16, 2048, 10, 480, true, 3, false, 2263.1},
      {"BF-07", "30b", 8, 2048, 3, 504, true, 3, false, 2002.8},
      {"BF-08", "30b", 8, 1024, 6, 1008, true, 3, false, 2084.0},
      {"BF-09", "13b", 8, 32768, 1, 24, true, 3, false, 1976.5},
      {"BF-10", "13b", 8, 16384, 3, 72, true, 3, false, 2985.1},
      {"BF-11", "13b", 8, 4096, 10, 240, true, 3, false, 4717.5},
      {"BF-12", "13b", 64, 2048, 2, 128, false, 3, false, 4800.1},
      {"BF-13", "13b", 32, 2048, 2, 64, false, 3, false, 4811.2},
      {"BF-14", "13b", 16, 2048, 2, 32, false, 3, false, 4767.5},
      {"BF-15", "13b", 8, 2048, 2, 16, false, 3, false, 4792.0},
      {"BF-16", "13b", 8, 1024, 40, 960, true, 3, false, 5502.4},
      {"BF-17", "7b", 8, 65536, 1, 16, true, 3, false, 1956.8},
      {"BF-18", "7b", 8, 32768, 2, 32, true, 3, false, 3318.8},
      {"BF-19", "7b", 8, 8192, 8, 128, true, 3, false, 6935.1},
      {"BF-20", "7b", 8, 4096, 16, 256, true, 3, false, 8611.6},
      {"BF-21", "7b", 8, 2048, 6, 48, false, 3, false, 10643.0},
      {"BF-22", "7b", 8, 1024, 64, 1024, true, 3, false, 10203.5},
      {"BF-23", "3b", 8, 65536, 1, 16, true, 3, false, 3262.4},
      {"BF-24", "3b", 8, 32768, 3, 144, true, 3, false, 5873.0},
      {"BF-25", "3b", 8, 16384, 1, 48, false, 3, false, 11152.9},
      {"BF-26", "3b", 8, 8192, 3, 144, false, 3, false, 16578.2},
      {"BF-27", "3b", 8, 4096, 5, 240, false, 3, false, 20964.0},
      {"BF-28", "3b", 64, 2048, 6, 1152, false, 3, false, 22526.0},
      {"BF-29", "3b", 32, 2048, 6, 576, false, 3, false, 23021.9},
      {"BF-30", "3b", 16, 2048, 10, 480, false, 3, false, 24142.8},
      {"BF-31", "3b", 8, 1024, 20, 960, false, 3, false, 27046.1},
      {"BF-32", "3b", 8, 512, 40, 1920, false, 3, false, 27965.1},
      {"BF-33", "1b", 8, 65536, 1, 16, true, 3, false, 5506.2},
      {"BF-34", "1b", 8, 32768, 1, 32, false, 3, false, 12025.4},
      {"BF-35", "1b", 8, 16384, 2, 64, false, 3, false, 19649.2},
      {"BF-36", "1b", 8, 8192, 3, 96, false, 3, false, 29157.0},
      {"BF-37", "1b", 8, 4096, 7, 224, false, 3, false, 38535.2},
      {"BF-38", "1b", 64, 2048, 20, 1280, false, 3, false, 44402.4},
      {"BF-39", "1b", 32, 2048, 20, 640, false, 3, false, 45130.7},
      {"BF-40", "1b", 16, 2048, 20, 320, false, 3, false, 46037.2},
      {"BF-41", "1b", 8, 2048, 14, 112, false, 3, false, 45455.6},
      {"BF-42", "1b", 8, 1024, 18, 576, false, 3, false, 48910.9},
      {"BF-43", "1b", 8, 512, 56, 1792, false, 3, false, 52275.1},
      {"BF-44", "760m", 8, 32768, 1, 16, false, 3, false, 16291.6},
      {"BF-45", "760m", 8, 16384, 3, 48, false, 3, false, 27815.1},
      {"BF-46", "760m", 8, 8192, 6, 96, false, 3, false, 41825.2},
      {"BF-47", "760m", 8, 4096, 12, 192, false, 3, false, 55459.2},
      {"BF-48", "760m", 32, 2048, 24, 768, false, 3, false, 67971.6},
      {"BF-49", "760m", 16, 2048, 24, 384, false, 3, false, 68551.2},
      {"BF-50", "760m", 8, 2048, 24, 384, false, 3, false, 63147.1},
      {"BF-51", "760m", 8, 1024, 48, 768, false, 3, false, 78581.0},
      {"BF-52", "760m", 8, 512, 96, 1536, false, 3, false, 83749.8},
      {"F8-01", "3b", 8, 32768, 3, 144, true, 3, true, 5856.6},
      {"F8-02", "3b", 8, 8192, 3, 144, false, 3, true, 19146.8},
      {"F8-03", "3b", 8, 2048, 10, 480, false, 3, true, 30586.5},
      {"F8-04", "3b", 8, 512, 40, 1920, false, 3, true, 36527.1},
      {"F8-05", "1b", 8, 32768, 1, 32, false, 3, true, 12580.4},
      {"F8-06", "1b", 8, 8192, 2, 64, false, 3, true, 32010.9},
      {"F8-07", "1b", 8, 512, 56, 1792, false, 3, true, 70315.4},
  };
  // The two runs that set a constant: FlashAttention 1's share of a flash kernel's rate, and the
  // latency of a collective's ring step between nodes.
  const std::map<std::string, std::string> calibrating = {{"BF-34", "flash1's share"},
                                                          {"LS-10", "collective_step_us"}};
  const DeviceProfile h100 = h100_profile();
  for (const FoundryRow& r : rows) {
    const bool large_scale = std::string(r.id).rfind("LS", 0) == 0;
    const Overrides settings = r.fp8 ? Overrides{"fp8=true"} : Overrides{};
    const Overrides config =
        joined(mpt(r.model, r.seq), layout(1, 1, 1, r.zero, r.micro, r.global, r.checkpointing ? "full" : "none"));
    out.push_back(
        run("llm-foundry", str(r.id, " ", r.model, " seq ", r.seq, " on ", r.gpus, r.fp8 ? " fp8" : ""),
            "mosaicml/llm-foundry scripts/train/benchmarking/README.md", h100, r.gpus, config,
            software_with("llm-foundry", large_scale ? settings : joined(settings, {"attention_kernel=flash1"})),
            r.tokens_per_s_per_gpu, 0, calibrating.count(r.id) ? calibrating.at(r.id) : ""));
  }
}

}  // namespace

const std::vector<PublishedRun>& published_runs() {
  static const std::vector<PublishedRun> all = [] {
    std::vector<PublishedRun> out;
    megatron_runs(out);
    torchtitan_runs(out);
    llm_foundry_runs(out);
    trident_runs(out);
    return out;
  }();
  return all;
}

}  // namespace trident
