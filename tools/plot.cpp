// plot: a run's metrics.jsonl -> a PNG of its training and validation loss, tokens/s and
// TFLOPS per device (and MFU) against iterations, drawn by gnuplot.
//
//   plot --metrics runs/gpt-tiny/metrics.jsonl [--output FILE.png] [--script FILE.gp] [--title TEXT]
//
// A resumed run appends to its metrics file, so an iteration can appear twice (after a restart
// from an earlier checkpoint): the later line wins. An incomplete last line (a run killed while
// writing) is skipped with a warning; any other malformed line is an error naming its number.
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace trident;

namespace {

struct Options {
  std::string metrics, output, script, title;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description("A run's metrics.jsonl -> a PNG of loss (training and validation), tokens/s and TFLOPS per "
                  "device (and MFU) against iterations, drawn by gnuplot.");
  app.add_option("--metrics", o.metrics, "the run's train.metrics_file")->required();
  app.add_option("--output", o.output, "the PNG to write (default: the metrics file's name with .png)");
  app.add_option("--script", o.script, "also write the gnuplot script (with its data) here");
  app.add_option("--title", o.title, "the picture's title (default: the metrics file's path)");
  return app;
}

struct Row {
  double loss = NAN, valid_loss = NAN, tokens_per_s = NAN, tflops_6pd = NAN, tflops_model = NAN, mfu = NAN;
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
    rows[line.at("iteration").get<int64_t>()] = {number_or_nan(line, "loss"),         number_or_nan(line, "valid_loss"),
                                                 number_or_nan(line, "tokens_per_s"), number_or_nan(line, "tflops_6pd"),
                                                 number_or_nan(line, "tflops_model"), number_or_nan(line, "mfu")};
  }
  if (rows.empty()) fail("metrics file '", path, "' holds no iterations");
  return rows;
}

// gnuplot's inline data: one block per curve, "iteration value" lines, NaN left out.
std::string data_block(const std::string& name, const std::map<int64_t, Row>& rows, double Row::*field, double scale = 1) {
  std::string out = "$" + name + " << EOD\n";
  for (const auto& [iteration, row] : rows)
    if (!std::isnan(row.*field)) out += str(iteration, " ", row.*field * scale, "\n");
  return out + "EOD\n";
}

bool any_value(const std::map<int64_t, Row>& rows, double Row::*field) {
  for (const auto& [iteration, row] : rows)
    if (!std::isnan(row.*field)) return true;
  return false;
}

std::string gnuplot_script(const std::map<int64_t, Row>& rows, const std::string& png, const std::string& title) {
  const bool valid = any_value(rows, &Row::valid_loss), mfu = any_value(rows, &Row::mfu);
  auto quoted = [](std::string text) {
    for (size_t at = 0; (at = text.find('"', at)) != std::string::npos; at += 2) text.insert(at, "\\");
    return "\"" + text + "\"";
  };
  std::string s = data_block("loss", rows, &Row::loss) + data_block("valid", rows, &Row::valid_loss) +
                  data_block("tokens", rows, &Row::tokens_per_s) + data_block("tflops6pd", rows, &Row::tflops_6pd) +
                  data_block("tflopsmodel", rows, &Row::tflops_model) + data_block("mfu", rows, &Row::mfu, 100);
  s += "set terminal pngcairo size 900,1000 noenhanced\nset output " + quoted(png) + "\n";
  s += "set multiplot layout 3,1 title " + quoted(title) + "\nset grid\nset key top right opaque\nset xlabel \"iteration\"\n";
  s += "set ylabel \"loss\"\nplot $loss with lines lw 2 title \"training\"";
  s += valid ? ", $valid with linespoints pt 7 lw 2 title \"validation\"\n" : "\n";
  s += "set ylabel \"tokens/s\"\nplot $tokens with lines lw 2 title \"tokens/s\"\n";
  s += "set ylabel \"TFLOP/s per device\"\n";
  if (mfu) s += "set y2label \"MFU (%)\"\nset y2tics\nset ytics nomirror\n";
  s += "plot $tflopsmodel with lines lw 2 title \"Megatron formula\", $tflops6pd with lines lw 2 title \"6PD\"";
  s += mfu ? ", $mfu axes x1y2 with lines lw 1 dt 2 title \"MFU\"\n" : "\n";
  return s + "unset multiplot\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options;
    CLI::App app{"", "plot"};
    if (!parse_command_line(describe(app, options), argc, argv)) return 0;
    const std::string png =
        options.output.empty() ? fs::path(options.metrics).replace_extension(".png").string() : options.output;
    const auto rows = read_metrics(options.metrics);
    const std::string script = gnuplot_script(rows, png, options.title.empty() ? options.metrics : options.title);
    if (!options.script.empty()) write_text_file(options.script, script);

    FILE* gnuplot = popen("gnuplot 2>&1", "w");
    if (!gnuplot) fail("cannot start gnuplot: ", std::strerror(errno));
    std::fwrite(script.data(), 1, script.size(), gnuplot);
    const int status = pclose(gnuplot);
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
      fail("gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
    if (WEXITSTATUS(status) != 0 || !fs::exists(png))
      fail("gnuplot could not draw '", png, "' (exit code ", WEXITSTATUS(status), ")");
    std::printf("wrote %s: %zu iterations (%lld to %lld)\n", png.c_str(), rows.size(),
                static_cast<long long>(rows.begin()->first), static_cast<long long>(rows.rbegin()->first));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
