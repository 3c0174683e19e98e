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
// `attention_tflops`; whether the software uses one is core/plan/time_model.h's Software.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

struct DeviceProfile {
  std::string name = "A100 80GB SXM";
  double peak_tflops = 312;        // dense 16-bit tensor-core peak (for MFU)
  double matmul_tflops = 230;      // achieved by a large 16-bit multiply
  double memory_gbs = 2039;        // specified memory bandwidth
  double memory_efficiency = 0.9;  // fraction of it elementwise kernels achieve
  double attention_tflops = 180;   // fused attention, forward and backward (causal FLOPs)
  int64_t sms = 108;               // streaming multiprocessors: one tile each per wave
  int64_t tile_m = 256, tile_n = 128;
  int64_t alignment = 8;           // elements: tensor cores want dimensions in multiples of it
  double link_efficiency = 0.8;    // achieved bus bandwidth of collectives / the link's rate
};

// A100 80 GB SXM: the specification (312 TFLOP/s, 2039 GB/s, 108 SMs), the fp16 multiply
// measured at 230 TFLOP/s, FlashAttention-2's published forward-and-backward rate on A100 at
// head sizes 64-128 (about 180 TFLOP/s; not measured here).
DeviceProfile a100_profile();
// H100 80 GB SXM: the specification (989 TFLOP/s, 3350 GB/s, 132 SMs) and docs/gpu-h100's
// tools/bench: bf16 multiply 771 TFLOP/s, a 16-bit vector multiply at 3.0 TB/s (0.90 of the
// specification), and the GPT-2 XL layer's 430 TFLOP/s forward and backward, of which what
// the model's multiplies and memory-bound work leave is attention: 138 TFLOP/s.
DeviceProfile h100_profile();
// The built-in profile for a device name (as CUDA reports it, or "a100" / "h100"), or none.
const DeviceProfile* known_profile(const std::string& device_name);

// A profile file: YAML with the fields above by name (every field required); errors name the
// file and the field.
DeviceProfile load_device_profile(const std::string& path);
std::string device_profile_yaml(const DeviceProfile& profile);

}  // namespace trident
