// What a device achieves, for the planner's time model (core/plan/time_model.h): one profile per
// device, measured or taken from published figures, never fitted to a layout.
//
// Matrix multiplies run at `matmul_tflops` (what a large, well-shaped multiply reaches) scaled
// by tile and wave quantization (NVIDIA's Matrix Multiplication Background guide): the output
// is cut into tile_m x tile_n tiles, a partly filled tile costs a whole one, and tiles run in
// waves of `sms` at a time, so a last wave that fills few SMs costs a whole wave. A multiply
// is also never faster than moving its operands through memory (a roofline). Memory-bound
// operations (LayerNorm, GELU, dropout, residual adds, softmax, the optimizer) move their bytes
// at memory_gbs x memory_efficiency. A fused (flash) attention kernel runs at
// `attention_tflops` at long sequences and head size 128, less at shorter ones and smaller
// heads (core/plan/time_model.h's attention_rate_share); whether the software uses one is
// core/plan/software.h's. FP8 multiplies run at `fp8_matmul_tflops` (the 16-bit rate where the
// device has no FP8). Communication overlapped with computation takes SMs and memory bandwidth
// from it: the computation beside it slows by `overlap_contention` of the overlapped time. A
// collective between nodes waits `collective_step_us` at each step of its ring.
// The profile also holds the device's memory, and names the machine the device sits in: GPUs per
// node, the link between them inside a node, each GPU's share of the network between nodes and its
// link to host memory, all as specified, of which collectives reach `link_efficiency`.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

struct DeviceProfile {
  std::string name = "A100 80GB SXM";
  double memory_gib = 80;          // memory per GPU
  double peak_tflops = 312;        // dense 16-bit tensor-core peak (for MFU)
  double matmul_tflops = 230;      // achieved by a large 16-bit multiply
  double memory_gbs = 2039;        // specified memory bandwidth
  double memory_efficiency = 0.9;  // fraction of it elementwise kernels achieve
  double attention_tflops = 180;   // fused attention, forward and backward (causal FLOPs), long sequences
  double fp8_matmul_tflops = 230;  // achieved by a large FP8 multiply (no FP8 on an A100: the 16-bit rate)
  double collective_step_us = 8;   // latency of each ring step of a collective between nodes
                                   // (set from llm-foundry's 7B run on 512 H100s, taken for both)
  double overlap_contention = 0.5; // share of overlapped communication time the computation loses
                                   // (set from torchtitan's async-TP gain on H100s, taken for both)
  int64_t sms = 108;               // streaming multiprocessors: one tile each per wave
  int64_t tile_m = 256, tile_n = 128;
  int64_t alignment = 8;           // elements: tensor cores want dimensions in multiples of it
  double link_efficiency = 0.8;    // achieved bus bandwidth of collectives / the link's rate
  int64_t gpus_per_node = 8;
  double intra_node_gbs = 300;     // GB/s per GPU inside a node, one direction (NVLink 3)
  double inter_node_gbs = 25;      // GB/s per GPU between nodes (one 200 Gb/s HDR InfiniBand port)
  double host_link_gbs = 25;       // GB/s per GPU to host memory, one direction (PCIe 4.0 x16): offload
};

// A100 80 GB SXM in a DGX A100 or HGX node: the specification (312 TFLOP/s, 2039 GB/s, 108
// SMs), the fp16 multiply measured at 230 TFLOP/s, FlashAttention-2's published
// forward-and-backward rate on A100 at head size 128 and long sequences (about 180 TFLOP/s; not
// measured here); no FP8 (the 16-bit rate); overlap contention and collective latency as the
// H100's (no A100 run measures them); 8 GPUs on NVLink 3 (600 GB/s both ways: 300 each), one 200 Gb/s HDR port per
// GPU, PCIe 4.0.
DeviceProfile a100_profile();
// H100 80 GB SXM: the specification (989 TFLOP/s, 3350 GB/s, 132 SMs), a 16-bit vector
// multiply at 3.0 TB/s (0.90 of the specification, docs/gpu-h100's tools/bench), and five
// constants each set from one published run (docs/planning.md lists them): the multiplies at
// 640 TFLOP/s, which reproduces Llama 3 405B's 8192-GPU run at sequence 8192 (Dubey et al. 2024,
// Table 4: 430 TFLOP/s per GPU; a lone 8192^3 multiply reaches 771 in docs/gpu-h100, a ceiling
// training at scale does not keep); flash attention at 262 TFLOP/s at long sequences, which
// reproduces its 131072-token run (380); FP8 multiplies at 1400, which reproduce NeMo's Llama 3
// 8B FP8 run on 8 GPUs; overlap contention 0.5, which reproduces torchtitan's async-TP gain on
// Llama 3 70B; 8 us per ring step between nodes, which reproduces llm-foundry's 7B run on 512
// GPUs. 8 GPUs on NVLink 4 (900 GB/s both ways: 450 each), one 400 Gb/s NDR port per
// GPU, PCIe 5.0 (64 GB/s specified; 50 counted, as 25 of PCIe 4.0's 32).
DeviceProfile h100_profile();
// The H100s of torchtitan's benchmarks: 96 GB of HBM2e at 2.4 TB/s, power-limited to 500 W
// (Meta's Grand Teton servers): every tensor-core rate the SXM H100's times a clock share set
// from torchtitan's Llama 3 8B FSDP 8 compile run (docs/planning.md). Not picked by a device
// name: the published runs (core/plan/published_runs.h) name it.
DeviceProfile h100_hbm2e_profile();
// H200 SXM: the H100 SXM's tensor cores at the same clock (989 TFLOP/s, 132 SMs), so the
// H100's rates and constants, with the H200's own memory: 141 GB of HBM3e (140 GiB, as CUDA
// reports it) at 4.8 TB/s specified; NVLink 4, one 400 Gb/s port per GPU and PCIe 5.0 as
// the H100's. Nothing in it is set from an H200 run: trident's own runs on one H200 and
// torchtitan's on 32 and 64 are held out against it (docs/planning.md).
DeviceProfile h200_profile();
// The built-in profile for a device name (as CUDA reports it, or "a100" / "h100" / "h200"), or
// none (an H100 or H200 on PCIe or NVL runs at other clocks, a GH200 at other power).
const DeviceProfile* known_profile(const std::string& device_name);

// A profile file: YAML with the fields above by name (every field required: `bench --profile`
// writes them all); errors name the file and the field. Rates, sizes and links must be positive,
// the efficiencies in (0, 1], overlap_contention in [0, 1].
DeviceProfile load_device_profile(const std::string& path);
std::string device_profile_yaml(const DeviceProfile& profile);

}  // namespace trident
