// The proof trident gives its own model, for a program's: a model trains the same at any
// parallel layout. check_layouts runs a program that trains with trident's Trainer from
// `section.key=value` arguments (one that registers its own block, say) once in one process
// and once per layout under a launcher, and compares every iteration's loss, auxiliary losses and
// experts' load (as the metrics file records them, to 9 significant digits) and the final weights, gathered whole from each
// run's checkpoint at full precision, with the single process's.
#pragma once

#include <string>
#include <vector>

namespace trident {

struct LayoutCheck {
  std::string program;                            // the program's path
  std::vector<std::string> arguments;             // its arguments in every run: model, data, train.iters, ...
  // Per layout, its arguments (parallel.*, recompute, ...); its world size is the product of
  // the parallel.tensor, pipeline, context and data it gives (1 for each it does not).
  std::vector<std::vector<std::string>> layouts;
  // Starts a layout's processes: the command, then the world size, then the program. The
  // launcher is shell text, used as written; the program, arguments and paths each reach the
  // runs as one word (quoted where the shell would read them otherwise).
  std::string launcher = "mpirun --oversubscribe -np";
  std::string work_dir;      // each run's checkpoints, metrics and output go into a folder of it
  // Relative, on every loss and on the weights as a whole; 0 takes the runs' precision's (as the
  // single process's checkpoint records it): 1e-10 for fp64, 1e-5 for fp32, 2e-2 for bf16 and fp16.
  double tolerance = 0;
};

struct LayoutCheckResult {
  bool equal = true;
  std::string report;  // a line per run: the largest differences, or why it is not equal
};

// Fails (Error) on a check that cannot run: no program, layouts or work_dir, a tolerance that is
// negative or not a number, a size in a layout that is not a positive integer, or a metrics file
// without losses. A difference in a loss's 9th significant digit (as recorded) is not counted.
LayoutCheckResult check_layouts(const LayoutCheck& check);

}  // namespace trident
