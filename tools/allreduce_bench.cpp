// allreduce_bench: collective bandwidth with nccl-tests semantics, for every trident backend.
//
//   mpirun -np 4 build/allreduce_bench [--op all_reduce,reduce_scatter,all_gather,all_to_all]
//       [--dtype float,double,bfloat16,half] [--min-bytes 32K] [--max-bytes 16M]
//       [--iters 20] [--warmup 5] [--backend auto|mpi|gloo|nccl] [--device cpu|cuda]
//
// For each size (doubling): `warmup` untimed calls, then the mean time of `iters` calls,
// averaged over ranks. algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce and
// (n-1)/n for the others, where bytes is the size of the whole buffer (the input of
// reduce-scatter, the output of all-gather, either side of all-to-all), as nccl-tests reports them.
// all_to_all (Ulysses context parallelism's exchange of sequence for heads) runs when named.
#include <torch/cuda.h>
#include <torch/types.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/text.h"
#include "core/timer.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/launch.h"

using namespace trident;

namespace {

struct Options {
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather"};
  std::vector<std::string> dtypes = {"float"};
  int64_t min_bytes = 32 << 10, max_bytes = 16 << 20;
  int64_t iters = 20, warmup = 5;
  std::string backend = "auto", device = "cpu";
  CommOptions comm;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Bandwidth of all-reduce, reduce-scatter, all-gather and all-to-all over every rank of "
                  "the job, with nccl-tests' algbw and busbw.");
  app.add_option("--op", o.ops, "collectives, comma-separated")
      ->delimiter(',')->check(checked(one_of({"all_reduce", "reduce_scatter", "all_gather", "all_to_all"})));
  app.add_option("--dtype", o.dtypes, "element types, comma-separated")
      ->delimiter(',')->check(checked(one_of({"float", "double", "bfloat16", "half"})));
  app.add_option("--min-bytes", o.min_bytes, "smallest buffer, e.g. 32K")
      ->transform(CLI::AsSizeValue(false))->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--max-bytes", o.max_bytes, "largest buffer (sizes double), e.g. 16M")
      ->transform(CLI::AsSizeValue(false))->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--iters", o.iters, "timed calls per size")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed calls first")->check(checked(at_least(0)))->capture_default_str();
  app.add_option("--backend", o.backend, "communicator")
      ->check(checked(one_of(spellings<Backend>())))->capture_default_str();
  app.add_option("--device", o.device, "where the buffers live")
      ->check(checked(one_of(spellings<TrainDevice>())))->capture_default_str();
  return app;
}

torch::Dtype dtype_of(const std::string& name) {
  if (name == "float") return torch::kFloat;
  if (name == "double") return torch::kDouble;
  if (name == "bfloat16") return torch::kBFloat16;
  return torch::kHalf;  // "half": the command line admits no other name
}

struct Measurement {
  double seconds;
  bool correct;
};

// Times `iters` calls of one collective on buffers of `bytes` in total.
Measurement measure(Communicator& comm, const std::string& op, torch::Dtype dtype, int64_t bytes,
                    const Options& o) {
  const int n = comm.size();
  const auto options = torch::TensorOptions().dtype(dtype).device(o.comm.device);
  const int64_t count = bytes / int64_t(torch::elementSize(dtype));
  const int64_t chunk = count / n;
  auto whole = torch::full({chunk * n}, double(comm.rank() + 1), options);
  auto part = torch::full({chunk}, double(comm.rank() + 1), options);
  // all_to_all: rank r sends `mark(r, i)` in chunk i, so rank q's chunk r must hold mark(r, q); a
  // chunk sent to the wrong rank, or from the wrong one, shows. Small integers, exact in every
  // dtype (modulo a prime below 256: distinct up to 15 ranks).
  const auto mark = [n](const torch::Tensor& r, const torch::Tensor& i) { return (r * n + i) % 251 + 1; };
  const auto ranks = torch::arange(n, options.dtype(torch::kLong)), me = torch::full_like(ranks, comm.rank());
  torch::Tensor sent, received;
  if (op == "all_to_all") {
    sent = mark(me, ranks).to(dtype).repeat_interleave(chunk);
    received = torch::empty_like(sent);
  }
  auto call = [&] {
    if (op == "all_reduce") comm.all_reduce(whole, ReduceOp::sum);
    else if (op == "reduce_scatter") comm.reduce_scatter(part, whole, ReduceOp::sum);
    else if (op == "all_gather") comm.all_gather(whole, part);
    else comm.all_to_all(received, sent);
  };
  auto synchronize = [&] {
    if (o.comm.device.is_cuda()) torch::cuda::synchronize();
  };
  // One checked call: sums of rank + 1 over n ranks are exact small integers.
  call();
  synchronize();
  const double sum = n * (n + 1) / 2.0;
  const auto chunks_hold = [&](const torch::Tensor& t, const torch::Tensor& values) {
    return t.view({n, chunk}).eq(values.to(dtype).unsqueeze(1)).all().item<bool>();
  };
  bool correct = op == "all_reduce"       ? whole.eq(sum).all().item<bool>()
                 : op == "reduce_scatter" ? part.eq(sum).all().item<bool>()
                 : op == "all_gather"     ? chunks_hold(whole, ranks + 1)  // rank r's r + 1 in chunk r
                                          : chunks_hold(received, mark(ranks, me));
  for (int64_t i = 0; i < o.warmup; ++i) call();
  synchronize();
  comm.barrier();
  Stopwatch stopwatch;
  for (int64_t i = 0; i < o.iters; ++i) call();
  synchronize();
  auto seconds = torch::full({1}, stopwatch.elapsed_ms() / 1e3 / o.iters, torch::kDouble);
  auto ok = torch::full({1}, correct ? 0.0 : 1.0, torch::kDouble);
  if (o.comm.device.is_cuda()) {
    seconds = seconds.to(o.comm.device);
    ok = ok.to(o.comm.device);
  }
  comm.all_reduce(seconds, ReduceOp::avg);
  comm.all_reduce(ok, ReduceOp::max);
  return {seconds.item<double>(), ok.item<double>() == 0.0};
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<LaunchInfo> detected = detect_launch_or_report();
  if (!detected) return 2;
  const LaunchInfo& launch = *detected;
  // The arguments are checked on every rank and a mistake reported once (parallel/comm/failure.h).
  Options o;
  std::exception_ptr input_error;
  try {
    CLI::App app{"", "allreduce_bench"};
    if (!parse_command_line(describe(app, o), argc, argv)) return 0;
    o.comm.backend = spelled<Backend>(o.backend);
    if (spelled<TrainDevice>(o.device) == TrainDevice::cuda) o.comm.device = torch::kCUDA;
    check_backend(launch, o.comm);
  } catch (const std::exception&) {
    input_error = std::current_exception();
  }
  try {
    auto comm = device_world(join_job(launch, o.comm.timeout, input_error), launch, o.comm);
    const int rank = comm->rank();
    const int n = comm->size();
    if (rank == 0) {
      std::printf("# allreduce_bench: %d ranks, backend %s, device %s, %lld iterations after %lld warm-up\n",
                  n, comm->backend().c_str(), o.comm.device.str().c_str(),
                  static_cast<long long>(o.iters), static_cast<long long>(o.warmup));
      std::fflush(stdout);  // the job has met: a watcher (a test's launcher) may read it before the table
    }
    double bus_sum = 0;
    int rows = 0, wrong = 0;
    for (const auto& op : o.ops) {
      const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
      for (const auto& dtype_name : o.dtypes) {
        const torch::Dtype dtype = dtype_of(dtype_name);
        if (rank == 0)
          std::printf("#\n# %-14s %-8s %12s %12s %10s %12s %12s %6s\n", "op", "type", "size(B)",
                      "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
        for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
          // Whole chunks per rank, as nccl-tests rounds sizes.
          const int64_t element = int64_t(torch::elementSize(dtype));
          const int64_t size = bytes / (element * n) * element * n;
          if (size == 0) continue;
          const Measurement m = measure(*comm, op, dtype, size, o);
          const double algbw = double(size) / m.seconds / 1e9;
          bus_sum += algbw * factor;
          ++rows;
          wrong += m.correct ? 0 : 1;
          if (rank == 0)
            std::printf("  %-14s %-8s %12lld %12lld %10.1f %12.3f %12.3f %6d\n", op.c_str(),
                        dtype_name.c_str(), static_cast<long long>(size),
                        static_cast<long long>(size / element), m.seconds * 1e6, algbw,
                        algbw * factor, m.correct ? 0 : 1);
        }
      }
    }
    if (rank == 0) std::printf("#\n# Avg bus bandwidth : %.4f GB/s\n", rows ? bus_sum / rows : 0.0);
    comm.reset();
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    return report_failure(e, int(launch.world_size));
  }
}
