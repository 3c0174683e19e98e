// plot: runs' metrics.jsonl -> a PNG of their training and validation loss, tokens/s, TFLOPS per
// device (and MFU) and, where measured, peak GPU memory, against iterations, tokens or time,
// drawn by gnuplot (core/report/gnuplot_panels.h); several runs share each panel, a colour per
// run. --html writes a report page instead: each run's device, ranks, layout and resolved config,
// its plan beside its measurements, and the panels (core/report/html_report.h).
//
//   plot --metrics runs/a/metrics.jsonl [--metrics runs/b/metrics.jsonl ...] [--label A --label B]
//        [--x iteration | tokens | time] [--output FILE.png] [--script FILE.gp] [--title TEXT]
//        [--html FILE.html [--profile FILE]]
//
// A run's plan needs its run record (metrics.run.json beside metrics.jsonl, which train writes)
// and, for its times, a device profile: --profile's, else the built-in one of the record's
// device (plan --device's), else the plan has memory only.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"
#include "core/report/gnuplot_panels.h"
#include "core/report/html_report.h"
#include "core/report/metrics_file.h"
#include "core/report/plan_comparison.h"
#include "core/report/run_record.h"

namespace fs = std::filesystem;
using namespace trident;

namespace {

struct Options {
  std::vector<std::string> metrics, labels;
  std::string x = "iteration", output, script, title, html, profile;
};

CLI::App& describe(CLI::App& app, Options& o) {
  app.description(
      "Runs' metrics.jsonl -> a PNG of loss (training and validation), tokens/s, TFLOPS per device "
      "(and MFU) and peak GPU memory against iterations, tokens or time, drawn by gnuplot; several runs "
      "share each panel. --html: a report page with each run's layout, config and plan beside its "
      "measurements.");
  app.add_option("--metrics", o.metrics, "a run's train.metrics_file (again for each further run)")->required();
  app.add_option("--label", o.labels, "each run's name in the legend, in --metrics' order (default: its folder)");
  app.add_option("--x", o.x, "the horizontal axis: iteration, tokens or time (seconds of training)")
      ->check(CLI::IsMember({"iteration", "tokens", "time"}))
      ->capture_default_str();
  auto* output = app.add_option(
      "--output", o.output, "the PNG to write (default: the metrics file's name with .png; needed with several runs)");
  app.add_option("--script", o.script, "also write the gnuplot script (with its data) here");
  app.add_option("--title", o.title, "the picture's title (default: the metrics files' paths)");
  auto* html = app.add_option("--html", o.html, "write an HTML report here instead of the PNG")->excludes(output);
  app.add_option("--profile", o.profile,
                 "the device profile the plan's times take (bench --profile writes one; default: the built-in "
                 "profile of the run's device)")
      ->needs(html);
  return app;
}

// A folder under the system's temporary one, removed with everything in it when it goes.
struct ScratchFolder {
  std::string path;
  ScratchFolder() {
    std::string pattern = (fs::temp_directory_path() / "trident-plot-XXXXXX").string();
    if (!mkdtemp(pattern.data())) fail("plot: cannot make a temporary folder in ", fs::temp_directory_path().string());
    path = pattern;
  }
  ~ScratchFolder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
};

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

// Each run's record and plan for the report; a run without a record (written before train kept
// them) is reported without its plan.
std::vector<ReportedRun> reported_runs(const Options& o, const std::vector<PlottedRun>& runs) {
  std::optional<DeviceProfile> given;
  if (!o.profile.empty()) given = load_device_profile(o.profile);
  std::vector<ReportedRun> reported;
  for (size_t r = 0; r < runs.size(); ++r) {
    ReportedRun run{runs[r].label, o.metrics[r], &runs[r].rows};
    const std::string path = run_record_path(o.metrics[r]);
    if (!fs::exists(path)) {
      run.no_record = str("no run record '", path, "' beside it (a run from before train wrote one): no plan");
      std::fprintf(stderr, "warning: %s: %s\n", o.metrics[r].c_str(), run.no_record.c_str());
    } else {
      run.record = read_run_record(path);
      const DeviceProfile* profile = given ? &*given : known_profile(run.record->device);
      run.comparison = compare_with_plan(*run.record, path, runs[r].rows, profile,
                                         str("none built in for '", run.record->device,
                                             "', so no times (plot --profile FILE; bench --profile "
                                             "measures one)"));
    }
    reported.push_back(std::move(run));
  }
  return reported;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options;
    CLI::App app{"", "plot"};
    if (!parse_command_line(describe(app, options), argc, argv)) return 0;
    if (options.metrics.size() > 1 && options.output.empty() && options.html.empty())
      fail("plot: --output is needed with several runs (", options.metrics.size(), " --metrics)");
    for (const std::string& file : {options.output, options.html})
      if (const fs::path folder = fs::path(file).parent_path();
          !file.empty() && !folder.empty() && !fs::is_directory(folder))
        fail("plot: '", file, "': its folder '", folder.string(), "' does not exist");
    const std::vector<std::string> labels = labels_of(options);
    const MetricsAxis axis = metrics_axis(options.x);
    std::vector<PlottedRun> runs;
    std::string paths;
    for (size_t r = 0; r < options.metrics.size(); ++r) {
      runs.push_back({labels[r], read_metrics_file(options.metrics[r])});
      place_on_axis(runs.back().rows, axis, options.metrics[r]);
      paths += (r ? ", " : "") + options.metrics[r];
    }
    const std::string title = options.title.empty() ? paths : options.title;
    std::vector<ReportedRun> reported;
    if (!options.html.empty()) {
      reported = reported_runs(options, runs);
      for (size_t r = 0; r < runs.size(); ++r)
        if (reported[r].comparison) {
          runs[r].planned_tokens_per_s = reported[r].comparison->tokens_per_s.plan;
          runs[r].planned_memory_gib = reported[r].comparison->memory_gib.plan;
        }
    }
    // The report's picture is drawn into a folder of its own, removed whatever happens.
    std::optional<ScratchFolder> scratch;
    if (!options.html.empty()) scratch.emplace();
    const std::string output = scratch ? scratch->path + "/panels.svg"
                               : options.output.empty()
                                   ? fs::path(options.metrics[0]).replace_extension(".png").string()
                                   : options.output;
    const std::string script =
        gnuplot_script(runs, axis, scratch ? PictureFormat::svg : PictureFormat::png, output, title);
    if (!options.script.empty()) write_text_file(options.script, script);
    run_gnuplot(script, output);
    std::string written = output;
    if (scratch) {
      write_text_file(options.html, html_report(title, reported, read_text_file(output, "gnuplot's picture")));
      written = options.html;
    }
    for (const PlottedRun& run : runs)
      std::printf("wrote %s: %s%zu iterations (%lld to %lld)\n", written.c_str(),
                  runs.size() > 1 ? (run.label + ", ").c_str() : "", run.rows.size(),
                  static_cast<long long>(run.rows.begin()->first), static_cast<long long>(run.rows.rbegin()->first));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
