#include "train/layout_check.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"
#include "train/checkpoint/checkpoint.h"

namespace trident {
namespace {

struct Run {
  std::vector<double> losses;     // per iteration
  std::vector<double> auxiliary;  // per iteration, its aux/<name> and moe/<name> values in the file's order
  std::map<std::string, torch::Tensor> weights;
  Precision precision = Precision::fp32;
};

// The world size a layout asks for: the product of its parallel.tensor, pipeline, context and
// data (1 where the layout does not give one).
int64_t world_size(const std::vector<std::string>& layout) {
  int64_t size = 1;
  for (const std::string& argument : layout)
    for (const std::string key : {"parallel.tensor=", "parallel.pipeline=", "parallel.context=", "parallel.data="})
      if (argument.rfind(key, 0) == 0) {
        size_t used = 0;
        int64_t n = 0;
        try {
          n = std::stoll(argument.substr(key.size()), &used);
        } catch (const std::exception&) {
        }
        if (n < 1 || used != argument.size() - key.size())
          fail("LayoutCheck: '", argument, "' must give a positive integer size");
        size *= n;
      }
  return size;
}

// `word` as one word of a POSIX shell command: left alone when it holds nothing the shell reads
// specially, else in single quotes (a quote inside written '\''). A command's first word with
// '=' in it would be read as a variable assignment.
std::string shell_word(const std::string& word, bool first = false) {
  const std::string safe = std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+.,:/@%") +
                           (first ? "" : "=");
  const bool plain = !word.empty() && word.find_first_not_of(safe) == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs `command`, its output into `log`; "" when it exits 0, else why not.
std::string run(const std::string& command, const std::string& log) {
  const int status = std::system((command + " >" + shell_word(log) + " 2>&1").c_str());
  if (status == 0) return "";
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(log);
  std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (output.size() > 2000) output = "..." + output.substr(output.size() - 2000);
  return trident::str("`", command, "` failed (", code < 0 ? std::string("killed") : trident::str("exit code ", code), "):\n", output);
}

Run read_run(const std::filesystem::path& dir) {
  Run result;
  const auto file = dir / "metrics.jsonl";
  std::ifstream metrics(file);
  for (std::string line; std::getline(metrics, line);) try {
      const auto json = nlohmann::json::parse(line);
      result.losses.push_back(json.at("loss").get<double>());
      for (const auto& [key, value] : json.items())
        if (key.rfind("aux/", 0) == 0 || key.rfind("moe/", 0) == 0) result.auxiliary.push_back(value.get<double>());
    } catch (const nlohmann::json::exception& e) {
      fail("LayoutCheck: line ", result.losses.size() + 1, " of ", file.string(), " gives no loss: ", e.what());
    }
  if (result.losses.empty()) fail("LayoutCheck: ", file.string(), " records no iteration: did the program train?");
  const CheckpointStore store((dir / "checkpoints").string());
  result.weights = read_global_weights(store.path(store.latest()));
  result.precision = read_saved_run(store.path(store.latest())).config.precision;
  return result;
}

// What equal runs of `precision` differ by: summation orders that differ between layouts round
// differently, by about the precision's epsilon times the steps' growth. fp8 also scales each
// tensor-parallel rank's shard by its own largest magnitude, so its layouts round differently.
double precision_tolerance(Precision precision) {
  switch (precision) {
    case Precision::fp64: return 1e-10;
    case Precision::fp32: return 1e-5;
    case Precision::bf16:
    case Precision::fp16: return 2e-2;
    case Precision::fp8: return 5e-2;
  }
  return 1e-5;
}

// The relative differences of `run` from `serial`; "" when within `tolerance`, else the line.
std::string compare(const Run& serial, const Run& run, double tolerance, std::string& summary) {
  if (run.losses.size() != serial.losses.size())
    return trident::str(run.losses.size(), " iterations logged, the single process logged ", serial.losses.size());
  if (run.auxiliary.size() != serial.auxiliary.size())
    return trident::str(run.auxiliary.size(), " auxiliary losses logged, the single process logged ",
                        serial.auxiliary.size());
  // The metrics file records a loss to 9 significant digits: runs equal to the last bit may still
  // differ there by one unit of the 9th digit, which no tolerance below it can tell apart.
  double worst_loss = 0;
  bool losses_differ = false;
  const auto compare_losses = [&](const std::vector<double>& expect, const std::vector<double>& got) {
    for (size_t i = 0; i < expect.size(); ++i) {
      const double expected = std::abs(expect[i]), difference = std::abs(got[i] - expect[i]);
      // One unit, read back from decimal into binary, may come out a little above or below it.
      const double recorded_unit = expected > 0 ? std::pow(10.0, std::floor(std::log10(expected)) - 8) : 0.0;
      losses_differ = losses_differ || difference > std::max(tolerance * expected, 1.5 * recorded_unit);
      worst_loss = std::max(worst_loss, expected > 0 ? difference / expected : difference);
    }
  };
  compare_losses(serial.losses, run.losses);
  compare_losses(serial.auxiliary, run.auxiliary);
  double difference = 0, norm = 0, worst_tensor = 0;
  std::string worst_name;
  for (const auto& [name, value] : serial.weights) {
    const auto found = run.weights.find(name);
    if (found == run.weights.end()) return trident::str("its checkpoint lacks ", name);
    if (!found->second.sizes().equals(value.sizes()))
      return trident::str(name, " has shape ", found->second.sizes(), ", the single process's ", value.sizes());
    const double delta = (found->second.to(torch::kDouble) - value.to(torch::kDouble)).norm().item<double>();
    const double size = value.to(torch::kDouble).norm().item<double>();
    difference += delta * delta, norm += size * size;
    if (size > 0 && delta / size > worst_tensor) worst_tensor = delta / size, worst_name = name;
  }
  const double model = norm > 0 ? std::sqrt(difference / norm) : std::sqrt(difference);
  summary = trident::str("losses within ", worst_loss, ", weights within ", model, " (worst tensor ", worst_name, " ",
                worst_tensor, ")");
  if (losses_differ || model > tolerance) return trident::str(summary, ": above the tolerance ", tolerance);
  return "";
}

}  // namespace

LayoutCheckResult check_layouts(const LayoutCheck& check) {
  if (check.program.empty()) fail("LayoutCheck: no program to run");
  if (check.layouts.empty()) fail("LayoutCheck: no layouts to compare with the single process");
  if (check.work_dir.empty()) fail("LayoutCheck: no work_dir for the runs' checkpoints and metrics");
  if (!(check.tolerance >= 0) || !std::isfinite(check.tolerance))
    fail("LayoutCheck: tolerance must be a positive number (or 0 for the runs' precision's), not ", check.tolerance);
  namespace fs = std::filesystem;
  LayoutCheckResult result;
  const auto start = [&](const std::string& name, const std::string& launch, const std::vector<std::string>& layout) {
    const fs::path dir = fs::path(check.work_dir) / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<std::string> words = {check.program};
    words.insert(words.end(), check.arguments.begin(), check.arguments.end());
    words.insert(words.end(), layout.begin(), layout.end());
    words.push_back("train.checkpoint_dir=" + (dir / "checkpoints").string());
    words.push_back("train.metrics_file=" + (dir / "metrics.jsonl").string());
    words.push_back("train.log_dir=" + (dir / "logs").string());
    std::string command = launch + shell_word(words.front(), true);  // the launcher is the caller's shell text
    for (size_t w = 1; w < words.size(); ++w) command += " " + shell_word(words[w]);
    return std::make_pair(dir, run(command, (dir / "output.txt").string()));
  };
  const auto [serial_dir, serial_failure] = start("serial", "", {});
  if (!serial_failure.empty()) return {false, "single process: " + serial_failure};
  const Run serial = read_run(serial_dir);
  const double tolerance = check.tolerance > 0 ? check.tolerance : precision_tolerance(serial.precision);
  for (size_t l = 0; l < check.layouts.size(); ++l) {
    const auto& layout = check.layouts[l];
    const std::string name = join(layout, " ");
    const auto [dir, failure] = start(trident::str("layout-", l), trident::str(check.launcher, " ", world_size(layout), " "), layout);
    std::string summary, problem = failure;
    if (problem.empty()) problem = compare(serial, read_run(dir), tolerance, summary);
    result.equal = result.equal && problem.empty();
    result.report += trident::str(name, ": ", problem.empty() ? summary : problem, "\n");
  }
  return result;
}

}  // namespace trident
