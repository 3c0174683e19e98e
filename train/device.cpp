#include "train/device.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <unistd.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "model/fused_kernels.h"
#include "parallel/comm/communicator.h"
#include "parallel/fp8_multiply.h"

#ifdef TRIDENT_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trident {

torch::Device training_device(TrainDevice device, int64_t local_rank) {
  if (device == TrainDevice::cpu) return torch::kCPU;
  if (!torch::cuda::is_available())
    fail("train.device=cuda, but this LibTorch has no CUDA or sees no GPU; use train.device=cpu");
  return torch::Device(torch::kCUDA, int(local_rank % int64_t(torch::cuda::device_count())));
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

std::string device_name(const torch::Device& device) {
#ifdef TRIDENT_TORCH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  return device.str();
}

torch::Dtype weights_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp64: return torch::kDouble;
    case Precision::bf16:
    case Precision::fp8: return torch::kBFloat16;
    case Precision::fp16: return torch::kHalf;
    case Precision::fp32: return torch::kFloat;
  }
  return torch::kFloat;
}

std::string set_cpu_threads(int64_t threads, int64_t local_ranks) {
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); threads <= 0 && omp) threads = std::atoi(omp);
  if (threads <= 0) {
    cpu_set_t allowed;
    const int64_t cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
    threads = std::max<int64_t>(1, cpus / std::max<int64_t>(1, local_ranks));
  }
  // OpenBLAS's own entry points, when the BLAS LibTorch loaded is OpenBLAS (Debian's).
  using GetParallel = int (*)();
  using SetThreads = void (*)(int);
  const auto parallel = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  const auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  const int n = int(threads);
  if (parallel && set_blas && parallel() == 2) {  // OpenMP
    torch::set_num_threads(n);
    set_blas(n);
    return str(n, n == 1 ? " CPU thread" : " CPU threads", ", shared by LibTorch and OpenBLAS (OpenMP)");
  }
  if (parallel && set_blas && parallel() == 1) {  // pthreads
    torch::set_num_threads(1);
    set_blas(n);
    return str(n, n == 1 ? " CPU thread" : " CPU threads", " for OpenBLAS (pthreads: its own pool), 1 for LibTorch's other operations");
  }
  torch::set_num_threads(n);  // MKL's threads too, when LibTorch has it (pip's: OpenMP-threaded)
  const bool mkl = dlsym(RTLD_DEFAULT, "mkl_get_max_threads") != nullptr;
  return str(n, n == 1 ? " CPU thread" : " CPU threads", mkl ? ", shared by LibTorch and MKL (OpenMP)" : " (LibTorch)");
}

std::string keep_freed_host_memory() {
#ifdef __GLIBC__
  constexpr int kHeapUpTo = 32 << 20;   // the most glibc takes (half its largest heap)
  constexpr int kKeepFree = 1 << 30;
  if (mallopt(M_MMAP_THRESHOLD, kHeapUpTo) == 1 && mallopt(M_TRIM_THRESHOLD, kKeepFree) == 1)
    return "host memory: tensors up to 32 MiB from the heap, up to 1 GiB of it kept when freed";
#endif
  return "";
}

Software build_software(const torch::Device& device) {
  const Software software = trident_software_on_libtorch(TORCH_VERSION);
  return device.is_cuda() && fused::built() ? software : without_fused_kernels(software);
}

BuildInfo build_info() {
  BuildInfo info;
  info.trident_version = TRIDENT_VERSION;
  info.torch_version = TORCH_VERSION;
#ifdef TRIDENT_TORCH_CUDA
  info.torch_cuda_api = true;
#endif
  try {  // the CUDA runtime LibTorch was built with; a CPU LibTorch's stub hooks throw
    const long version = at::detail::getCUDAHooks().versionCUDART();  // 1000 major + 10 minor
    info.torch_cuda = str(version / 1000, ".", version % 1000 / 10);
  } catch (const std::exception&) {
  }
  info.backends = available_backends();
  info.nccl_streams = nccl_uses_torch_streams();
  return info;
}

std::string describe(const BuildInfo& info) {
  return str("trident ", info.trident_version, " on LibTorch ", info.torch_version,
             info.torch_cuda.empty() ? " (CPU only)" : str(" (CUDA ", info.torch_cuda, ")"),
             ", trident's CUDA code ", info.torch_cuda_api ? "compiled in" : "not compiled in",
             "; communicators: ", info.backends, info.nccl_streams ? " (NCCL on its own CUDA streams)" : "");
}

int64_t multiprocessor_count(const torch::Device& device) {
#ifdef TRIDENT_TORCH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->multiProcessorCount;
#else
  (void)device;
#endif
  return 1;
}

double device_memory_gib(const torch::Device& device) {
#ifdef TRIDENT_TORCH_CUDA
  if (device.is_cuda()) return double(at::cuda::getDeviceProperties(device.index())->totalGlobalMem) / double(1 << 30);
#else
  (void)device;
#endif
  return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / double(1 << 30);
}

void check_precision_runs_on(Precision precision, const torch::Device& device) {
  if (precision == Precision::fp8) {
    if (!fp8::built())
      fail("precision=fp8 needs LibTorch 2.x (8-bit floats and their scaled multiply); this build has LibTorch ",
           TORCH_VERSION, ": use precision=bf16");
#ifdef TRIDENT_TORCH_CUDA
    if (device.is_cuda()) {
      const auto* gpu = at::cuda::getDeviceProperties(device.index());
      if (gpu->major * 10 + gpu->minor < 89)
        fail("precision=fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or later: Ada, Hopper); ",
             gpu->name, " has ", gpu->major, ".", gpu->minor, ": use precision=bf16");
    }
#endif
    return;
  }
  if (precision != Precision::fp16 || device.is_cuda()) return;
  try {
    auto x = torch::ones({2, 2}, torch::kHalf);
    (void)torch::mm(x, x);
  } catch (const c10::Error&) {
    fail("precision=fp16 needs train.device=cuda with this LibTorch (it has no fp16 matrix "
         "multiply on the CPU); use precision=bf16 on the CPU");
  }
}

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
