#include "train/device.h"

#ifdef TRIDENT_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trident {

#ifdef TRIDENT_TORCH_CUDA
struct IntervalTimer::Events {
  at::cuda::CUDAEvent start{cudaEventDefault}, stop{cudaEventDefault};
};

std::optional<AllocatorStats> allocator_stats(const torch::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  // Index 0 of each statistic is the aggregate over pool kinds, in every LibTorch version.
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return AllocatorStats{stats.allocated_bytes[0].current, stats.allocated_bytes[0].peak,
                        stats.reserved_bytes[0].current};
}

void reset_peak_memory(const torch::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}
#else
struct IntervalTimer::Events {};

std::optional<AllocatorStats> allocator_stats(const torch::Device&) { return std::nullopt; }
void reset_peak_memory(const torch::Device&) {}
#endif

IntervalTimer::IntervalTimer(const torch::Device& device) : device_(device) {
#ifdef TRIDENT_TORCH_CUDA
  if (device_.is_cuda()) events_ = std::make_unique<Events>();
#endif
}

IntervalTimer::~IntervalTimer() = default;

void IntervalTimer::start() {
#ifdef TRIDENT_TORCH_CUDA
  if (events_) return events_->start.record(c10::cuda::getCurrentCUDAStream(device_.index()));
#endif
  start_ = std::chrono::steady_clock::now();
}

void IntervalTimer::stop() {
#ifdef TRIDENT_TORCH_CUDA
  if (events_) return events_->stop.record(c10::cuda::getCurrentCUDAStream(device_.index()));
#endif
  stop_ = std::chrono::steady_clock::now();
}

double IntervalTimer::elapsed_ms() {
#ifdef TRIDENT_TORCH_CUDA
  if (events_) {
    events_->stop.synchronize();
    return double(events_->start.elapsed_time(events_->stop));
  }
#endif
  return std::chrono::duration<double, std::milli>(stop_ - start_).count();
}

}  // namespace trident
