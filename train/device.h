// What the trainer needs from an accelerator beyond tensors: timing with device events and the
// caching allocator's statistics. On the CPU the timer reads the host clock and there are no
// allocator statistics. Only device.cpp sees CUDA headers (when LibTorch has CUDA).
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/plan/time_model.h"

namespace trident {

// The device of this rank for train.device: the CPU, or GPU local_rank % visible GPUs. Error
// when CUDA is asked for and LibTorch sees no GPU.
torch::Device training_device(TrainDevice device, int64_t local_rank);
// The device's name as CUDA reports it ("NVIDIA H100 80GB HBM3"), or its type ("cpu").
std::string device_name(const torch::Device& device);
// Waits for all the work queued on a GPU (nothing to wait for on the CPU).
void synchronize(const torch::Device& device);
// trident's software as this build runs it on `device`, for the time and memory models: LibTorch
// 2.x computes attention in a fused kernel (SDPA), 1.x as matmuls with the softmax through
// memory; the fused element-wise kernels and loss (model/fused_kernels.h) run on CUDA in a build
// that has them, the composite path elsewhere.
Software build_software(const torch::Device& device);
// What this build of trident is and was compiled with (`train --version`; the CUDA variant's test
// checks that none of its CUDA code silently dropped out): LibTorch's version and CUDA ("" for
// a CPU LibTorch), whether trident's code for LibTorch's CUDA API (streams, events, the caching
// allocator) is compiled in, and the communicators.
struct BuildInfo {
  std::string trident_version, torch_version, torch_cuda;
  bool torch_cuda_api = false;
  std::string backends;
  bool nccl_streams = false;  // NCCL on streams ordered with LibTorch's (parallel/comm/nccl.cpp)
};
BuildInfo build_info();
std::string describe(const BuildInfo& info);
// Streaming multiprocessors of a GPU (1 on the CPU, which has no waves to quantize).
int64_t multiprocessor_count(const torch::Device& device);
// The device's memory in GiB: a GPU's, or the host's physical memory for the CPU.
double device_memory_gib(const torch::Device& device);
// train.threads: the CPU threads of LibTorch's intra-op pool and of its BLAS's, set together so
// that two pools never compete for the cores: OpenBLAS's OpenMP build and MKL share LibTorch's
// pool (both get `threads`); a pthreads OpenBLAS gets them and LibTorch one (its multiplies are
// most of the work); another BLAS: LibTorch's pool only. 0: OMP_NUM_THREADS when set, else the CPUs this process may run on shared
// among the `local_ranks` processes of its machine (waiting OpenMP threads spin, so pools on
// shared cores slow each other down). Returns what was set, for the log.
std::string set_cpu_threads(int64_t threads, int64_t local_ranks);
// Keeps the host memory training frees for the next iteration instead of giving it back to the
// kernel: glibc would map large tensors fresh on each allocation and trim the heap after frees,
// so every iteration would page-fault its activations in again (docs/measurements.md has the
// cost). Tensors up to 32 MiB come from the heap, and up to 1 GiB of free heap stays mapped: a
// caching allocator's trade, as LibTorch's CUDA allocator makes. Returns what was set, for the
// log (nothing where the C library is not glibc).
std::string keep_freed_host_memory();

// The dtype of the model's weights and activations for a precision.
torch::Dtype weights_dtype(Precision precision);
// Error when the device cannot train in this precision (fp16 on LibTorch 1.13's CPU, which has
// no fp16 matrix multiply).
void check_precision_runs_on(Precision precision, const torch::Device& device);

struct AllocatorStats {
  int64_t allocated = 0, peak_allocated = 0, reserved = 0;  // bytes
};
// nullopt on the CPU.
std::optional<AllocatorStats> allocator_stats(const torch::Device& device);
void reset_peak_memory(const torch::Device& device);

// Times the work queued on the device between start() and stop() without waiting for it: on
// CUDA two events on the current stream, read (after the stop event completes) by elapsed_ms().
class IntervalTimer {
 public:
  explicit IntervalTimer(const torch::Device& device);
  ~IntervalTimer();
  void start();
  void stop();
  double elapsed_ms();  // waits for the work up to stop() on CUDA

 private:
  struct Events;
  torch::Device device_;
  std::unique_ptr<Events> events_;
  std::chrono::steady_clock::time_point start_, stop_;
};

}  // namespace trident
