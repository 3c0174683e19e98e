// pipeline_bubble: the pipeline bubble of each schedule, measured on this machine beside the
// same schedule on paper (core/schedule/pipeline_simulation.h) and the papers' formulas.
//
//   mpirun -np P build/pipeline_bubble [--schedules gpipe,1f1b,interleaved_1f1b,zb-h1,zb-v,dualpipe-v]
//       [--micro-batches 4,8,16] [--layers 8] [--width 256] [--rows 64] [--iters 5] [--warmup 2]
//       [--threads 1] [--timeline] [--backend auto|mpi|gloo]
//   build/pipeline_bubble --actions P [--schedules ...] [--micro-batches ...]
//
// The job is one pipeline of P stages running the real runner (parallel/pipeline.h) on a toy
// model: `layers` layers tanh(x W^T) of width x width dealt to the virtual stages, `rows` rows
// per micro-batch, the loss their sum over M. Its F, I and W each cost one multiply per layer,
// as the papers assume (T_F = T_I = T_W). A stage's idle share is its time waiting in exchanges
// over the iteration (the median of `iters` after `warmup`); "paper" is the schedule run on
// paper with unit costs; the formula is 1F1B's and GPipe's (p-1)/(M+p-1), interleaved 1F1B's
// (p-1)/(vM+p-1), ZB-H1's (p-1)/(3M+p-1) (Qi et al. 2024: a bubble of (p-1)(T_F+T_B-T_W));
// ZB-V's and DualPipe-V's have none in closed form. --timeline draws each row's timeline on
// paper (each action a unit) and as measured (a unit the median action's time), two characters
// per unit (letters as render_timeline's: lower case on a rank's second chunk). A schedule whose
// generator is not written for P and M (why_not_generated) is a "skipped" row. --actions P, in
// one process, prints each schedule's actions for P ranks instead, without running them: per
// schedule and M a comment line and the rows of a schedule file (parallel.schedule_file's
// format), a start for one's own schedule, or the comment line alone saying why it is skipped.
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/text.h"
#include "core/schedule/pipeline_simulation.h"
#include "core/schedule/schedule_file.h"
#include "core/timer.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/launch.h"
#include "parallel/pipeline.h"

using namespace trident;

namespace {

struct Options {
  std::string schedules = "gpipe,1f1b,interleaved_1f1b,zb-h1,zb-v,dualpipe-v", micro_batches = "4,8,16";
  int64_t layers = 8, width = 256, rows = 64, iters = 5, warmup = 2, threads = 1, actions = 0;
  bool timeline = false;
  std::string backend = "auto";
  CommOptions comm;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("The pipeline bubble of each schedule, measured beside the schedule on paper and the formulas.");
  app.add_option("--schedules", o.schedules, "parallel.schedule values, by commas")->capture_default_str();
  app.add_option("--micro-batches", o.micro_batches, "micro-batch counts M, by commas")->capture_default_str();
  app.add_option("--layers", o.layers, "layers of the toy model (a multiple of 2 x ranks)")
      ->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--width", o.width, "each layer's width")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--rows", o.rows, "rows per micro-batch")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--iters", o.iters, "timed iterations (the median is reported)")->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed iterations first")->check(checked(at_least(0)))->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads per rank")->check(checked(at_least(1)))->capture_default_str();
  app.add_flag("--timeline", o.timeline, "draw each row's measured timeline");
  app.add_option("--actions", o.actions,
                 "print each schedule's actions for this many ranks as a schedule file; run nothing")
      ->check(checked(at_least(1)));
  app.add_option("--backend", o.backend, "communicator")->check(checked(one_of(spellings<Backend>())))->capture_default_str();
  return app;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The papers' idle share of a stage, where one is known in closed form.
std::string formula(const Layout& l) {
  const double p = double(l.pp_size), m = double(l.micro_batches), v = double(l.virtual_stages);
  switch (l.schedule) {
    case Schedule::gpipe:
    case Schedule::one_f_one_b: return fixed(100 * (p - 1) / (m + p - 1), 1);
    case Schedule::interleaved_1f1b: return fixed(100 * (p - 1) / (v * m + p - 1), 1);
    case Schedule::zb_h1: return fixed(100 * (p - 1) / (3 * m + p - 1), 1);
    case Schedule::zb_v:
    case Schedule::dualpipe_v: return "-";
  }
  return "-";
}

Layout row_layout(Schedule schedule, int64_t p, int64_t m) {
  Layout layout;
  layout.pp_size = p, layout.schedule = schedule, layout.micro_batches = m;
  layout.virtual_stages = least_virtual_stages(schedule);
  return layout;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<LaunchInfo> detected = detect_launch_or_report();
  if (!detected) return 2;
  const LaunchInfo& launch = *detected;
  Options o;
  std::vector<Schedule> schedules;
  std::vector<int64_t> counts;
  std::exception_ptr input_error;
  try {
    CLI::App app{"", "pipeline_bubble"};
    if (!parse_command_line(describe(app, o), argc, argv)) return 0;
    o.comm.backend = spelled<Backend>(o.backend);
    check_backend(launch, o.comm);
    const std::vector<std::string> known = spellings<Schedule>();
    for (const std::string& s : split(o.schedules, ',')) {
      if (std::find(known.begin(), known.end(), s) == known.end())
        fail("pipeline_bubble: --schedules takes parallel.schedule values by commas (", join(known, ", "), "), got '",
             s, "'");
      schedules.push_back(spelled<Schedule>(s));
    }
    for (const std::string& m : split(o.micro_batches, ',')) {
      if (m.size() > 6 || m.find_first_not_of("0123456789") != std::string::npos || std::stoll(m) < 1)
        fail("pipeline_bubble: --micro-batches takes positive counts by commas, got '", m, "'");
      counts.push_back(std::stoll(m));
    }
    if (o.actions > 0) {
      if (launch.world_size > 1) fail("pipeline_bubble: --actions runs nothing: start it as one process");
      for (Schedule schedule : schedules)
        for (int64_t m : counts) {
          std::printf("# parallel.schedule=%s, %lld ranks, M = %lld", name(schedule), (long long)o.actions,
                      (long long)m);
          const std::string why = why_not_generated(schedule, o.actions, m);
          if (!why.empty()) std::printf(": skipped, %s\n", why.c_str());
          else std::printf("\n%s", schedule_file_text(make_pipeline_schedule(row_layout(schedule, o.actions, m))).c_str());
        }
      return 0;
    }
    if (o.layers % (2 * launch.world_size) != 0)
      fail("pipeline_bubble: --layers (", o.layers, ") must be a multiple of 2 x ranks (", 2 * launch.world_size, ")");
  } catch (const std::exception&) {
    input_error = std::current_exception();
  }
  try {
    auto comm = join_job(launch, o.comm.timeout, input_error);
    torch::set_num_threads(int(o.threads));
    const int p = comm->size(), rank = comm->rank();
    torch::manual_seed(7);
    const auto input = torch::randn({o.rows, o.width});
    if (rank == 0) {
      std::printf("# %d stages, %lld layers of %lld x %lld, %lld rows per micro-batch, %lld thread(s) per rank; "
                  "idle %% of the iteration per stage\n",
                  p, (long long)o.layers, (long long)o.width, (long long)o.width, (long long)o.rows, (long long)o.threads);
      std::printf("%-17s %3s %9s", "schedule", "M", "iter(ms)");
      for (int r = 0; r < p; ++r) std::printf("  meas%-2d", r);
      for (int r = 0; r < p; ++r) std::printf(" paper%-2d", r);
      std::printf(" %8s\n", "formula");
    }
    for (Schedule schedule : schedules)
      for (int64_t m : counts) {
        if (const std::string why = why_not_generated(schedule, p, m); !why.empty()) {
          if (rank == 0) std::printf("%-17s %3lld  skipped: %s\n", name(schedule), (long long)m, why.c_str());
          continue;
        }
        const Layout layout = row_layout(schedule, p, m);
        PipelineSchedule generated = make_pipeline_schedule(layout);
        check_pipeline_schedule(generated, str("parallel.schedule=", schedule));
        const PipelineOptions options = pipeline_options(std::move(generated), rank, {o.rows, o.width}, input.options());
        // This rank's chunks: the layers of its virtual stages.
        const int64_t per_chunk = o.layers / (p * layout.virtual_stages);
        std::vector<std::vector<torch::Tensor>> chunks(size_t(layout.virtual_stages));
        for (auto& chunk : chunks)
          for (int64_t l = 0; l < per_chunk; ++l)
            chunk.push_back((torch::randn({o.width, o.width}) / std::sqrt(double(o.width))).requires_grad_());
        const int64_t last = options.schedule.stages() - 1;
        auto forward = [&](int64_t chunk, int64_t, const torch::Tensor& x) {
          torch::Tensor y = x.defined() ? x : input;
          for (const auto& w : chunks[size_t(chunk)]) y = torch::tanh(torch::matmul(y, w.t()));
          const bool loss = layout.virtual_stage(chunk, rank) == last;
          return loss ? y.sum() / double(m) : y;
        };
        std::vector<double> wall, idle;
        PipelineStats stats;
        for (int64_t i = 0; i < o.warmup + o.iters; ++i) {
          for (auto& chunk : chunks)
            for (auto& w : chunk) w.mutable_grad() = torch::Tensor();
          comm->barrier();
          Stopwatch stopwatch;
          stats = run_pipeline(*comm, options, forward, [] {});
          if (i < o.warmup) continue;
          wall.push_back(stopwatch.elapsed_ms());
          idle.push_back(stats.transfer_ms);
        }
        auto mine = torch::tensor({median(wall), median(idle)}, torch::kDouble);
        auto all = torch::empty({2 * p}, torch::kDouble);
        comm->all_gather(all, mine);
        // The measured timeline: each rank's actions, gathered to rank 0 as (start, end) pairs.
        auto times = torch::empty({int64_t(2 * stats.actions.size())}, torch::kDouble);
        for (size_t k = 0; k < stats.actions.size(); ++k)
          times[int64_t(2 * k)] = stats.actions[k].start_ms, times[int64_t(2 * k + 1)] = stats.actions[k].end_ms;
        std::vector<torch::Tensor> per_rank;
        for (int r = 0; r < p; ++r) {
          auto t = torch::empty({int64_t(2 * options.schedule.actions[size_t(r)].size())}, torch::kDouble);
          if (r == rank) t.copy_(times);
          comm->broadcast(t, r);
          per_rank.push_back(t);
        }
        if (rank != 0) continue;
        const double v = double(layout.virtual_stages);
        const PipelineTimeline paper = simulate_pipeline(options.schedule, {1 / v, 1 / v, 1 / v});
        double iteration = 0;
        for (int r = 0; r < p; ++r) iteration = std::max(iteration, all[2 * r].item<double>());
        std::printf("%-17s %3lld %9.1f", name(schedule), (long long)m, iteration);
        for (int r = 0; r < p; ++r) std::printf(" %6.1f ", 100 * all[2 * r + 1].item<double>() / all[2 * r].item<double>());
        for (int r = 0; r < p; ++r) std::printf(" %6.1f ", 100 * paper.bubble(r));
        std::printf(" %8s\n", formula(layout).c_str());
        if (!o.timeline) continue;
        PipelineTimeline measured;
        std::vector<double> durations;
        for (int r = 0; r < p; ++r)
          for (int64_t k = 0; k < per_rank[size_t(r)].numel() / 2; ++k)
            durations.push_back(per_rank[size_t(r)][2 * k + 1].item<double>() - per_rank[size_t(r)][2 * k].item<double>());
        const double unit = median(durations);
        for (int r = 0; r < p; ++r) {
          measured.times.emplace_back();
          for (int64_t k = 0; k < per_rank[size_t(r)].numel() / 2; ++k) {
            const double start = per_rank[size_t(r)][2 * k].item<double>() / unit;
            const double end = std::max(start + 1, per_rank[size_t(r)][2 * k + 1].item<double>() / unit);
            measured.times.back().push_back({std::round(start), std::round(end)});
            measured.makespan = std::max(measured.makespan, std::round(end));
          }
        }
        std::printf("on paper (unit costs per stage):\n%s", render_timeline(options.schedule, simulate_pipeline(options.schedule)).c_str());
        std::printf("measured (unit: the median action, %.2f ms):\n%s\n", unit,
                    render_timeline(options.schedule, measured).c_str());
      }
    comm->barrier();
    return 0;
  } catch (const std::exception& e) {
    return report_failure(e, int(launch.world_size));
  }
}
