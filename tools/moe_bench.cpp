// moe_bench: one Mixture-of-Experts layer (model/moe.h) forward and backward, and the
// all-to-all traffic of its expert parallelism alone, with the experts over every rank of the job.
//
//   mpirun -np 2 build/moe_bench [--tokens 1024] [--hidden 128] [--experts 8] [--topk 2]
//       [--ffn 96] [--dtype fp32|bf16] [--iters 20] [--warmup 3] [--threads 0]
//       [--backend auto|mpi|gloo|nccl] [--device cpu|cuda]
//
// Each rank routes its own `tokens` tokens (one micro-batch's, as the layer sees them). Two
// measurements, each the median over `iters` after `warmup`, the slowest rank's:
//  - layer: the layer's forward and backward (router, dispatch, SwiGLU experts, combine);
//  - all-to-all: the same exchanges without the experts' work: each token's k copies routed to
//    uniformly random experts (as a fresh router spreads them), dispatched and combined back,
//    forward and backward (four exchanges of rows, after the counts').
// Bytes are those a rank sends to other ranks in the four exchanges (its own rows stay home),
// averaged over ranks. The last line is the row as JSON (scripts/moe_compare reads it);
// scripts/pytorch_moe.py measures the same for a PyTorch layer.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/timer.h"
#include "model/moe.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/launch.h"
#include "parallel/expert_parallel.h"

using namespace trident;

namespace {

struct Options {
  int64_t tokens = 1024, hidden = 128, experts = 8, topk = 2, ffn = 96;
  std::string dtype = "fp32", backend = "auto", device = "cpu";
  int64_t iters = 20, warmup = 3, threads = 0;
  CommOptions comm;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("One Mixture-of-Experts layer's forward and backward, and its expert-parallel all-to-all alone, "
                  "with the experts over every rank of the job.");
  app.add_option("--tokens", o.tokens, "tokens per rank")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden size")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--experts", o.experts, "experts (a multiple of the ranks)")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--topk", o.topk, "experts per token")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--ffn", o.ffn, "each expert's SwiGLU width")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--dtype", o.dtype, "element type")->check(checked(one_of({"fp32", "bf16"})))->capture_default_str();
  app.add_option("--iters", o.iters, "timed repetitions (the median is reported)")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed repetitions first")->check(checked(at_least(0)))->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads per rank (0: LibTorch's default)")
      ->check(checked(at_least(0)))->capture_default_str();
  app.add_option("--backend", o.backend, "communicator")->check(checked(one_of(spellings<Backend>())))->capture_default_str();
  app.add_option("--device", o.device, "where the layer runs")->check(checked(one_of(spellings<TrainDevice>())))->capture_default_str();
  return app;
}

// The median over `iters` runs of `step` after `warmup`, in ms, the slowest rank's.
double median_ms(Communicator& comm, const Options& o, const std::function<void()>& step) {
  const auto synchronize = [&] {
    if (o.comm.device.is_cuda()) torch::cuda::synchronize();
  };
  for (int64_t i = 0; i < o.warmup; ++i) step();
  std::vector<double> ms;
  for (int64_t i = 0; i < o.iters; ++i) {
    synchronize();
    comm.barrier();
    Stopwatch stopwatch;
    step();
    synchronize();
    ms.push_back(stopwatch.elapsed_ms());
  }
  std::sort(ms.begin(), ms.end());
  auto slowest = torch::full({1}, ms[ms.size() / 2], torch::TensorOptions().dtype(torch::kDouble).device(o.comm.device));
  comm.all_reduce(slowest, ReduceOp::max);
  return slowest.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<LaunchInfo> detected = detect_launch_or_report();
  if (!detected) return 2;
  const LaunchInfo& launch = *detected;
  Options o;
  std::exception_ptr input_error;
  try {
    CLI::App app{"", "moe_bench"};
    if (!parse_command_line(describe(app, o), argc, argv)) return 0;
    o.comm.backend = spelled<Backend>(o.backend);
    if (spelled<TrainDevice>(o.device) == TrainDevice::cuda) o.comm.device = torch::kCUDA;
    check_backend(launch, o.comm);
    if (o.experts % launch.world_size != 0 || o.topk > o.experts)
      fail("moe_bench: --experts (", o.experts, ") must be a multiple of the ranks (", launch.world_size,
           ") and at least --topk (", o.topk, ")");
  } catch (const std::exception&) {
    input_error = std::current_exception();
  }
  try {
    auto comm = device_world(join_job(launch, o.comm.timeout, input_error), launch, o.comm);
    if (o.threads > 0) torch::set_num_threads(int(o.threads));
    const int n = comm->size(), rank = comm->rank();
    const torch::Dtype dtype = o.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
    const auto options = torch::TensorOptions().dtype(dtype).device(o.comm.device);

    ModelConfig model;
    model.hidden_size = o.hidden;
    model.activation = Activation::swiglu;
    model.add_bias_linear = false;
    model.num_moe_experts = o.experts;
    model.moe_router_topk = o.topk;
    model.moe_ffn_hidden_size = o.ffn;
    ExpertParallel ep{comm};
    const BlockContext context{model, TensorParallel{}, Recompute::none, ContextParallel{},
                               std::make_shared<DropoutStreams>(), 0, std::make_shared<AuxiliaryLosses>(), ep};
    MoE layer(context);
    torch::manual_seed(1234 + uint64_t(rank));  // each rank its own experts and tokens
    {
      torch::NoGradGuard no_grad;
      for (auto& p : layer->parameters()) p.normal_(0, 0.02);
    }
    layer->to(o.comm.device, dtype);
    const auto x = torch::randn({1, o.tokens, o.hidden}, options).requires_grad_();
    const auto grad = torch::randn({1, o.tokens, o.hidden}, options);
    const double layer_ms = median_ms(*comm, o, [&] {
      layer->zero_grad();
      layer->forward(x).backward(grad);
    });

    // The exchanges alone: the same number of rows, to uniformly random experts.
    int64_t sent_elsewhere = 0;
    const int64_t rows = o.tokens * o.topk, local = o.experts / n;
    const auto row_values = torch::randn({rows, o.hidden}, options);
    const double all_to_all_ms = median_ms(*comm, o, [&] {
      const auto experts = std::get<0>(torch::randint(o.experts, {rows}, options.dtype(torch::kLong)).sort());
      const auto counts = at::bincount(experts, {}, o.experts);
      const ExpertDispatch dispatch(counts, *comm);
      const auto sent = row_values.detach().requires_grad_();
      dispatch.combine(dispatch.dispatch(sent)).backward(row_values);
      const auto home = counts.narrow(0, rank * local, local).sum().item<int64_t>();
      sent_elsewhere = rows - home;
    });
    auto bytes = torch::full({1}, double(4 * sent_elsewhere * o.hidden * int64_t(torch::elementSize(dtype))),
                             torch::TensorOptions().dtype(torch::kDouble).device(o.comm.device));
    comm->all_reduce(bytes, ReduceOp::avg);
    if (rank == 0) {
      std::printf("# moe_bench: %d ranks (EP %d), backend %s, device %s, %s, median of %lld after %lld warm-up\n", n, n,
                  comm->backend().c_str(), o.comm.device.str().c_str(), o.dtype.c_str(), (long long)o.iters,
                  (long long)o.warmup);
      std::printf("| EP | tokens/rank | hidden | experts | top-k | ffn | layer fwd+bwd ms | all-to-all ms | all-to-all MB sent/rank |\n"
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
      std::printf("| %d | %lld | %lld | %lld | %lld | %lld | %.2f | %.2f | %.2f |\n", n, (long long)o.tokens,
                  (long long)o.hidden, (long long)o.experts, (long long)o.topk, (long long)o.ffn, layer_ms, all_to_all_ms,
                  bytes.item<double>() / 1e6);
      std::printf("{\"ep\": %d, \"layer_ms\": %.4f, \"all_to_all_ms\": %.4f, \"all_to_all_mb\": %.4f}\n", n, layer_ms,
                  all_to_all_ms, bytes.item<double>() / 1e6);
    }
    comm.reset();
    return 0;
  } catch (const std::exception& e) {
    return report_failure(e, int(launch.world_size));
  }
}
