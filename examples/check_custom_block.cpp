// The layout-equality proof for examples/custom_block's block: trains it in one process and at
// each layout below (tensor, sequence, pipeline, context and data parallelism, ZeRO-3, full
// recomputation) in fp64, and compares every loss and the final weights.
//   check_custom_block PATH/TO/custom_block WORK_DIR ["LAUNCHER"]   (default "mpirun --oversubscribe -np")
#include <trident/trident.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PATH/TO/custom_block WORK_DIR [\"LAUNCHER\"]\n", argv[0]);
    return 2;
  }
  try {
    trident::LayoutCheck check;
    check.program = argv[1];
    check.work_dir = argv[2];
    if (argc > 3) check.launcher = argv[3];
    check.arguments = {"precision=fp64", "train.iters=3"};
    check.layouts = {{"parallel.tensor=2"},
                     {"parallel.tensor=2", "parallel.sequence_parallel=true"},
                     {"parallel.pipeline=2"},
                     {"parallel.tensor=2", "parallel.pipeline=2"},
                     {"parallel.context=2", "recompute=full"},
                     {"parallel.data=2", "parallel.zero_stage=3"}};
    const trident::LayoutCheckResult result = trident::check_layouts(check);
    std::printf("%s%s\n", result.report.c_str(),
                result.equal ? "every layout equals the single process" : "NOT EQUAL");
    return result.equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
