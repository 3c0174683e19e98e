// adamw_bench: how fast trident's flat AdamW updates parameters on the CPU, the rate that
// ZeRO-Offload's step runs at, beside the planner's stated host AdamW rate (core/plan/planner.h).
//
//   build/adamw_bench [--params 16M,64M] [--threads 1,2] [--iters 5]
//
// One fp32 slice of N parameters with gradients and moments (16 bytes per parameter, plus the
// gradient), every element decayed; the median of --iters updates after one warm-up.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/command_line.h"
#include "core/text.h"
#include "optim/adamw.h"

using namespace trident;

namespace {

struct Options {
  std::vector<int64_t> params = {int64_t(16) << 20, int64_t(64) << 20};
  std::vector<int64_t> threads = {1, 2};
  int64_t iters = 5;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("Parameters per second of trident's flat AdamW update on the CPU (ZeRO-Offload's step), as a table.");
  app.add_option("--params", o.params, "slice sizes, comma-separated")->delimiter(',')->check(checked(at_least(1)));
  app.add_option("--threads", o.threads, "intra-op threads, comma-separated")->delimiter(',')->check(checked(at_least(1)));
  app.add_option("--iters", o.iters, "timed updates (the median is reported)")->check(checked(at_least(1)))
      ->capture_default_str();
  return app;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    CLI::App app{"", "adamw_bench"};
    if (!parse_command_line(describe(app, o), argc, argv)) return 0;
    OptimizerConfig config;
    std::printf("| parameters | threads | ms per update | parameters/s |\n| --- | --- | --- | --- |\n");
    for (const int64_t n : o.params)
      for (const int64_t threads : o.threads) {
        torch::set_num_threads(int(threads));
        std::vector<AdamWSlice> slices(1);
        AdamWSlice& s = slices.front();
        s.param = torch::randn({n});
        s.grad = torch::randn({n});
        s.exp_avg = torch::zeros({n});
        s.exp_avg_sq = torch::zeros({n});
        s.runs = {{0, n, true}};
        std::vector<double> ms;
        for (int64_t i = 0; i <= o.iters; ++i) {
          const auto start = std::chrono::steady_clock::now();
          adamw_update(slices, config, 1e-4, i + 1);
          const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
          if (i > 0) ms.push_back(elapsed);  // the first is the warm-up
        }
        std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
        const double median = ms[ms.size() / 2];
        std::printf("| %s | %lld | %.1f | %s |\n", si_units(double(n)).c_str(), (long long)threads, median,
                    si_units(double(n) / median * 1e3).c_str());
      }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
