// What the trainer needs from an accelerator beyond tensors: timing with device events and the
// caching allocator's statistics. On the CPU the timer reads the host clock and there are no
// allocator statistics. Only device.cpp sees CUDA headers (when LibTorch has CUDA).
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <optional>

namespace trident {

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
