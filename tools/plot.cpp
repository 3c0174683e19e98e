// plot: runs' metrics.jsonl -> a PNG of their training and validation loss, tokens/s, TFLOPS per
// device (and MFU) and, where measured, peak GPU memory, against iterations, tokens or time,
// drawn by gnuplot. Several runs share each panel, a colour per run.
//
//   plot --metrics runs/a/metrics.jsonl [--metrics runs/b/metrics.jsonl ...] [--label A --label B]
//        [--x iteration | tokens | time] [--output FILE.png] [--script FILE.gp] [--title TEXT]
//
// A resumed run appends to its metrics file, so an iteration can appear twice (after a restart
// from an earlier checkpoint): the later line wins. An incomplete last line (a run killed while
// writing) is skipped with a warning; any other malformed line is an error naming its number.
// Tokens and time are summed from each logged line's tokens/s and iteration time over the
// iterations since the line before (a line per log interval).
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace trident;

namespace {

struct Options {
  std::vector<std::string> metrics, labels;
  std::string x = "iteration", output, script, title;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description(
      "Runs' metrics.jsonl -> a PNG of loss (training and validation), tokens/s, TFLOPS per device "
      "(and MFU) and peak GPU memory against iterations, tokens or time, drawn by gnuplot; several runs "
      "share each panel.");
  app.add_option("--metrics", o.metrics, "a run's train.metrics_file (again for each further run)")->required();
  app.add_option("--label", o.labels, "each run's name in the legend, in --metrics' order (default: its folder)");
  app.add_option("--x", o.x, "the horizontal axis: iteration, tokens or time (seconds of training)")
      ->check(CLI::IsMember({"iteration", "tokens", "time"}))
      ->capture_default_str();
  app.add_option("--output", o.output,
                 "the PNG to write (default: the metrics file's name with .png; needed with several runs)");
  app.add_option("--script", o.script, "also write the gnuplot script (with its data) here");
  app.add_option("--title", o.title, "the picture's title (default: the metrics files' paths)");
  return app;
}

struct Row {
  double loss = NAN, valid_loss = NAN, tokens_per_s = NAN, tflops_6pd = NAN, tflops_model = NAN, mfu = NAN,
         elapsed_ms = NAN, memory_gib = NAN;
  double x = NAN;  // on the chosen axis
};

double number_or_nan(const json& line, const char* key) {
  const auto found = line.find(key);
  return found != line.end() && found->is_number() ? found->get<double>() : NAN;
}

std::map<int64_t, Row> read_metrics(const std::string& path) {
  std::istringstream in(read_text_file(path, "metrics file"));
  std::map<int64_t, Row> rows;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.empty()) continue;
    const json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_discarded() || !line.contains("iteration")) {
      if (in.peek() == EOF) {
        std::fprintf(stderr, "warning: line %lld of '%s' is incomplete (a run stopped while writing it): skipped\n",
                     static_cast<long long>(number), path.c_str());
        break;
      }
      fail("metrics file '", path, "' line ", number, " is not a JSON object with an iteration");
    }
    Row& row = rows[line.at("iteration").get<int64_t>()] = {};
    row.loss = number_or_nan(line, "loss");
    row.valid_loss = number_or_nan(line, "valid_loss");
    row.tokens_per_s = number_or_nan(line, "tokens_per_s");
    row.tflops_6pd = number_or_nan(line, "tflops_6pd");
    row.tflops_model = number_or_nan(line, "tflops_model");
    row.mfu = number_or_nan(line, "mfu");
    row.elapsed_ms = number_or_nan(line, "elapsed_ms");
    row.memory_gib = number_or_nan(line, "memory/peak_allocated_gib");
  }
  if (rows.empty()) fail("metrics file '", path, "' holds no iterations");
  return rows;
}

// Each row's place on the axis. Tokens and time grow by a line's rate over the iterations since
// the line before; a line without one (a validation at an iteration between log lines) takes the
// rate of the next line that has one, or of the last.
void place_rows(std::map<int64_t, Row>& rows, const std::string& axis, const std::string& path) {
  if (axis == "iteration") {
    for (auto& [iteration, row] : rows) row.x = double(iteration);
    return;
  }
  const auto per_iteration = [&](const Row& row) {
    const double seconds = row.elapsed_ms / 1000;
    return axis == "time" ? seconds : row.tokens_per_s * seconds;
  };
  double last_rate = NAN;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it)
    if (!std::isnan(per_iteration(it->second))) {
      last_rate = per_iteration(it->second);
      break;
    }
  if (std::isnan(last_rate))
    fail("metrics file '", path, "' has no ", axis == "time" ? "elapsed_ms" : "tokens_per_s and elapsed_ms",
         " to place its lines by ", axis, ": use --x iteration");
  double x = 0;
  int64_t previous = 0;
  for (auto it = rows.begin(); it != rows.end(); ++it) {
    double rate = last_rate;
    for (auto next = it; next != rows.end(); ++next)
      if (!std::isnan(per_iteration(next->second))) {
        rate = per_iteration(next->second);
        break;
      }
    x += double(it->first - previous) * rate;
    previous = it->first;
    it->second.x = x;
  }
}

struct Run {
  std::string label;
  std::map<int64_t, Row> rows;
};

// gnuplot's inline data: one block per curve, "x value" lines, NaN left out.
std::string data_block(const std::string& name, const std::map<int64_t, Row>& rows, double Row::*field,
                       double scale = 1) {
  std::string out = "$" + name + " << EOD\n";
  for (const auto& [iteration, row] : rows)
    if (!std::isnan(row.*field)) out += str(row.x, " ", row.*field * scale, "\n");
  return out + "EOD\n";
}

bool any_value(const std::map<int64_t, Row>& rows, double Row::*field) {
  for (const auto& [iteration, row] : rows)
    if (!std::isnan(row.*field)) return true;
  return false;
}

bool any_value(const std::vector<Run>& runs, double Row::*field) {
  for (const Run& run : runs)
    if (any_value(run.rows, field)) return true;
  return false;
}

std::string quoted(std::string text) {
  for (size_t at = 0; (at = text.find('"', at)) != std::string::npos; at += 2) text.insert(at, "\\");
  return "\"" + text + "\"";
}

// The panels: loss (training, and validation as points), tokens/s, TFLOP/s per device (and MFU on
// the right axis) and, where any run measured it, peak allocated GPU memory. Run r's curves are
// colour r; one run keeps both FLOP formulas, several show Megatron's only.
std::string gnuplot_script(const std::vector<Run>& runs, const std::string& axis, const std::string& png,
                           const std::string& title) {
  const bool memory = any_value(runs, &Row::memory_gib), mfu = any_value(runs, &Row::mfu), one = runs.size() == 1;
  std::string s;
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto& rows = runs[r].rows;
    const std::string n = std::to_string(r + 1);
    s += data_block("loss" + n, rows, &Row::loss) + data_block("valid" + n, rows, &Row::valid_loss) +
         data_block("tokens" + n, rows, &Row::tokens_per_s) + data_block("tflops6pd" + n, rows, &Row::tflops_6pd) +
         data_block("tflopsmodel" + n, rows, &Row::tflops_model) + data_block("mfu" + n, rows, &Row::mfu, 100) +
         data_block("memory" + n, rows, &Row::memory_gib);
  }
  const int panels = memory ? 4 : 3;
  s += str("set terminal pngcairo size 900,", 330 * panels + 10, " noenhanced\nset output ", quoted(png), "\n");
  s += str("set multiplot layout ", panels, ",1 title ", quoted(title), "\nset grid\nset key top right opaque\n");
  s += str("set xlabel ", quoted(axis == "time" ? "seconds of training" : axis), "\n");
  // Every panel over the same stretch of the axis (a panel of one run would take only its own),
  // and a margin above and below each curve.
  double low = INFINITY, high = -INFINITY;
  for (const Run& run : runs)
    for (const auto& [iteration, row] : run.rows) low = std::min(low, row.x), high = std::max(high, row.x);
  if (high > low) s += str("set xrange [", low, ":", high, "]\n");
  s += "set offsets 0, 0, graph 0.05, graph 0.05\n";
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
  const auto has = [&](size_t r, double Row::*field) { return any_value(runs[r].rows, field); };
  s += panel("loss", [&](size_t r, const std::string& n) {
    std::string out = str("$loss", n, " with lines lw 2 lc ", n, " title ", name(r, "training"));
    if (has(r, &Row::valid_loss))
      out += str(", $valid", n, " with linespoints pt 7 lw 2 dt 2 lc ", n, " title ", name(r, "validation"));
    return out;
  });
  s += panel("tokens/s", [&](size_t r, const std::string& n) {
    return str("$tokens", n, " with lines lw 2 lc ", n, " title ", name(r, one ? "tokens/s" : ""));
  });
  if (mfu) s += "set y2label \"MFU (%)\"\nset y2tics\nset ytics nomirror\n";
  s += panel("TFLOP/s per device", [&](size_t r, const std::string& n) {
    std::string out = str("$tflopsmodel", n, " with lines lw 2 lc ", n, " title ", name(r, "Megatron formula"));
    if (one) out += str(", $tflops6pd", n, " with lines lw 2 lc 2 title ", name(r, "6PD"));
    if (has(r, &Row::mfu))
      out += str(", $mfu", n, " axes x1y2 with lines lw 1 dt 2 lc ", one ? "3" : n, " title ", name(r, "MFU"));
    return out;
  });
  if (memory) {
    s += "unset y2label\nunset y2tics\nset ytics mirror\n";
    s += panel("peak allocated GPU memory (GiB)", [&](size_t r, const std::string& n) {
      return has(r, &Row::memory_gib)
                 ? str("$memory", n, " with lines lw 2 lc ", n, " title ", name(r, one ? "peak" : ""))
                 : std::string();
    });
  }
  return s + "unset multiplot\n";
}

// A run's default name: its metrics file's folder (runs/gpt-tiny/metrics.jsonl -> gpt-tiny), or
// the path where two runs' folders share a name.
std::vector<std::string> labels_of(const Options& o) {
  if (!o.labels.empty()) {
    if (o.labels.size() != o.metrics.size())
      fail("plot: ", o.labels.size(), " --label for ", o.metrics.size(), " --metrics; give one per run or none");
    return o.labels;
  }
  std::vector<std::string> labels;
  for (const std::string& path : o.metrics) labels.push_back(fs::absolute(path).parent_path().filename().string());
  for (size_t i = 0; i < labels.size(); ++i)
    if (std::count(labels.begin(), labels.end(), labels[i]) > 1) return o.metrics;
  return labels;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options;
    CLI::App app{"", "plot"};
    if (!parse_command_line(describe(app, options), argc, argv)) return 0;
    if (options.metrics.size() > 1 && options.output.empty())
      fail("plot: --output is needed with several runs (", options.metrics.size(), " --metrics)");
    const std::string png =
        options.output.empty() ? fs::path(options.metrics[0]).replace_extension(".png").string() : options.output;
    const std::vector<std::string> labels = labels_of(options);
    std::vector<Run> runs;
    std::string paths;
    for (size_t r = 0; r < options.metrics.size(); ++r) {
      runs.push_back({labels[r], read_metrics(options.metrics[r])});
      place_rows(runs.back().rows, options.x, options.metrics[r]);
      paths += (r ? ", " : "") + options.metrics[r];
    }
    const std::string script = gnuplot_script(runs, options.x, png, options.title.empty() ? paths : options.title);
    if (!options.script.empty()) write_text_file(options.script, script);

    FILE* gnuplot = popen("gnuplot 2>&1", "w");
    if (!gnuplot) fail("cannot start gnuplot: ", std::strerror(errno));
    std::fwrite(script.data(), 1, script.size(), gnuplot);
    const int status = pclose(gnuplot);
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
      fail("gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
    if (WEXITSTATUS(status) != 0 || !fs::exists(png))
      fail("gnuplot could not draw '", png, "' (exit code ", WEXITSTATUS(status), ")");
    for (const Run& run : runs)
      std::printf("wrote %s: %s%zu iterations (%lld to %lld)\n", png.c_str(),
                  runs.size() > 1 ? (run.label + ", ").c_str() : "", run.rows.size(),
                  static_cast<long long>(run.rows.begin()->first), static_cast<long long>(run.rows.rbegin()->first));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
