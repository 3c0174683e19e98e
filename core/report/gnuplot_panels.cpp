#include "core/report/gnuplot_panels.h"

#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "core/text.h"

namespace trident {

namespace {

// gnuplot's inline data: one block per curve, "x value" lines, NaN left out.
std::string data_block(const std::string& name, const MetricsRows& rows, double MetricsRow::*field, double scale = 1) {
  std::string out = "$" + name + " << EOD\n";
  for (const auto& [iteration, row] : rows)
    if (!std::isnan(row.*field)) out += str(row.x, " ", row.*field * scale, "\n");
  return out + "EOD\n";
}

bool any_value(const std::vector<PlottedRun>& runs, double MetricsRow::*field) {
  for (const PlottedRun& run : runs)
    if (any_value(run.rows, field)) return true;
  return false;
}

std::string quoted(std::string text) {
  for (size_t at = 0; (at = text.find('"', at)) != std::string::npos; at += 2) text.insert(at, "\\");
  return "\"" + text + "\"";
}

}  // namespace

// Run r's curves are colour r; one run keeps both FLOP formulas, several show Megatron's only.
std::string gnuplot_script(const std::vector<PlottedRun>& runs, MetricsAxis axis, PictureFormat format,
                           const std::string& output, const std::string& title) {
  const bool memory = any_value(runs, &MetricsRow::memory_gib), mfu = any_value(runs, &MetricsRow::mfu),
             one = runs.size() == 1;
  // Every panel over the same stretch of the axis (a panel of one run would take only its own).
  double low = INFINITY, high = -INFINITY;
  for (const PlottedRun& run : runs)
    for (const auto& [iteration, row] : run.rows) low = std::min(low, row.x), high = std::max(high, row.x);
  std::string s;
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto& rows = runs[r].rows;
    const std::string n = std::to_string(r + 1);
    s += data_block("loss" + n, rows, &MetricsRow::loss) + data_block("valid" + n, rows, &MetricsRow::valid_loss) +
         data_block("tokens" + n, rows, &MetricsRow::tokens_per_s) +
         data_block("tflops6pd" + n, rows, &MetricsRow::tflops_6pd) +
         data_block("tflopsmodel" + n, rows, &MetricsRow::tflops_model) +
         data_block("mfu" + n, rows, &MetricsRow::mfu, 100) + data_block("memory" + n, rows, &MetricsRow::memory_gib);
    // A plan's figure: a level line across the axis.
    for (const auto& [name, value] :
         {std::pair{"plantokens", runs[r].planned_tokens_per_s}, std::pair{"planmemory", runs[r].planned_memory_gib}})
      if (!std::isnan(value)) s += str("$", name, n, " << EOD\n", low, " ", value, "\n", high, " ", value, "\nEOD\n");
  }
  const int panels = memory ? 4 : 3;
  const int height = 330 * panels + 10;
  s += format == PictureFormat::png
           ? str("set terminal pngcairo size 900,", height, " noenhanced\n")
           : str("set terminal svg size 900,", height, " noenhanced background rgb \"white\"\n");
  s += str("set output ", quoted(output), "\n");
  s += str("set multiplot layout ", panels, ",1 title ", quoted(title), "\nset grid\nset key top right opaque\n");
  s += str("set xlabel ",
           quoted(axis == MetricsAxis::time     ? "seconds of training"
                  : axis == MetricsAxis::tokens ? "tokens"
                                                : "iteration"),
           "\n");
  if (high > low) s += str("set xrange [", low, ":", high, "]\n");
  s += "set offsets 0, 0, graph 0.05, graph 0.05\n";  // a margin above and below each curve
  // One plot command over every run: `curve(r)` gives run r's curves of a panel.
  const auto panel = [&](const std::string& ylabel,
                         const std::function<std::string(size_t, const std::string&)>& curve) {
    std::vector<std::string> parts;
    for (size_t r = 0; r < runs.size(); ++r) {
      const std::string part = curve(r, std::to_string(r + 1));
      if (!part.empty()) parts.push_back(part);
    }
    std::string out = "set ylabel " + quoted(ylabel) + "\nplot ";
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
    return out + "\n";
  };
  const auto name = [&](size_t r, const std::string& what) {
    return quoted(one ? what : runs[r].label + (what.empty() ? "" : " " + what));
  };
  const auto has = [&](size_t r, double MetricsRow::*field) { return any_value(runs[r].rows, field); };
  const auto plan_line = [&](double value, const std::string& block, const std::string& n, size_t r) {
    return std::isnan(value) ? std::string()
                             : str(", $", block, n, " with lines lw 2 dt 3 lc ", n, " title ", name(r, "plan"));
  };
  s += panel("loss", [&](size_t r, const std::string& n) {
    std::string out = str("$loss", n, " with lines lw 2 lc ", n, " title ", name(r, "training"));
    if (has(r, &MetricsRow::valid_loss))
      out += str(", $valid", n, " with linespoints pt 7 lw 2 dt 2 lc ", n, " title ", name(r, "validation"));
    return out;
  });
  s += panel("tokens/s", [&](size_t r, const std::string& n) {
    return str("$tokens", n, " with lines lw 2 lc ", n, " title ", name(r, one ? "tokens/s" : ""),
               plan_line(runs[r].planned_tokens_per_s, "plantokens", n, r));
  });
  if (mfu) s += "set y2label \"MFU (%)\"\nset y2tics\nset ytics nomirror\n";
  s += panel("TFLOP/s per device", [&](size_t r, const std::string& n) {
    std::string out = str("$tflopsmodel", n, " with lines lw 2 lc ", n, " title ", name(r, "Megatron formula"));
    if (one) out += str(", $tflops6pd", n, " with lines lw 2 lc 2 title ", name(r, "6PD"));
    if (has(r, &MetricsRow::mfu))
      out += str(", $mfu", n, " axes x1y2 with lines lw 1 dt 2 lc ", one ? "3" : n, " title ", name(r, "MFU"));
    return out;
  });
  if (memory) {
    s += "unset y2label\nunset y2tics\nset ytics mirror\n";
    s += panel("peak allocated GPU memory (GiB)", [&](size_t r, const std::string& n) {
      return has(r, &MetricsRow::memory_gib)
                 ? str("$memory", n, " with lines lw 2 lc ", n, " title ", name(r, one ? "peak" : ""),
                       plan_line(runs[r].planned_memory_gib, "planmemory", n, r))
                 : std::string();
    });
  }
  return s + "unset multiplot\n";
}

void run_gnuplot(const std::string& script, const std::string& output) {
  FILE* gnuplot = popen("gnuplot 2>&1", "w");
  if (!gnuplot) fail("cannot start gnuplot: ", std::strerror(errno));
  std::fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = pclose(gnuplot);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
    fail("gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
  if (WEXITSTATUS(status) != 0 || !std::filesystem::exists(output))
    fail("gnuplot could not draw '", output, "' (exit code ", WEXITSTATUS(status), ")");
}

}  // namespace trident
