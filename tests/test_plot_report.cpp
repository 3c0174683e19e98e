// plot --html: a run's plan beside its measurements, its layout and config, and the panels, on
// one page; read back as a user reads it, in a real browser (headless Chromium).
#include <gtest/gtest.h>
#include <png.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/layout.h"
#include "core/plan/device_profile.h"
#include "core/plan/memory.h"
#include "core/plan/planner.h"
#include "core/plan/software.h"
#include "core/report/run_record.h"
#include "core/text.h"
#include "tests/helpers.h"
#include "tests/launchers.h"

using trident::Config;
using trident::str;
using trident::testing::scratch_dir;

namespace {

using Result = trident::testing::CommandResult;
using trident::testing::kBin;
using trident::testing::kSource;
const auto run = trident::testing::run_command;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// As the report prints a figure: whole numbers from 100 on, else three significant digits.
std::string shown(double value) {
  char text[32];
  std::snprintf(text, sizeof text, std::fabs(value) >= 100 ? "%.0f" : "%.3g", value);
  return text;
}

std::string figure_row(const std::string& what, double plan, const std::string& measured, double ratio) {
  return str("<tr><td>", what, "</td><td>", shown(plan), "</td><td>", measured, "</td><td>", shown(ratio),
             "</td></tr>");
}

// A run of gpt-tiny on 2 ranks of an H100 (DP 2) as train records it, with three log lines: the
// first (the warm-up) is left out of the measurements, the other two give their median and the
// largest memory peak.
struct HandMadeRun {
  std::filesystem::path dir = scratch_dir();
  std::string metrics = (dir / "metrics.jsonl").string(), record_path = (dir / "metrics.run.json").string(),
              html = (dir / "report.html").string();
  Config config = [] {
    Config c = Config::load(kSource + "/configs/gpt-tiny.yaml");
    c.data.path = "corpus<1>&2";  // the page shows it as text
    return c;
  }();
  trident::RunRecord record{config.to_yaml(), 2,      "NVIDIA H100 80GB HBM3", "nccl", "2.11.0",
                            "0.1.0",          816768, "2026-11-28T12:00:00Z"};
  HandMadeRun() {
    std::ofstream(metrics)
        << R"({"iteration": 1, "loss": 5.5, "tokens_per_s": 100, "elapsed_ms": 20000, "tflops_model": 0.01, "mfu": 0.001, "memory/peak_allocated_gib": 9}
{"iteration": 2, "loss": 5.0, "tokens_per_s": 1000, "elapsed_ms": 2048, "tflops_model": 0.2, "mfu": 0.1, "memory/peak_allocated_gib": 2.0}
{"iteration": 3, "loss": 4.5, "tokens_per_s": 1200, "elapsed_ms": 1707, "tflops_model": 0.3, "mfu": 0.2, "memory/peak_allocated_gib": 2.5, "valid_loss": 4.6}
)";
    trident::write_run_record(record_path, record);
  }
};

}  // namespace

// The plan's figures are the planner's for the recorded config, ranks and device (the H100's
// built-in profile, LibTorch 2's software), beside the medians of the steady lines; the layout,
// the config (escaped) and the panels (inline SVG, with the plan as a line) are on the page.
TEST(PlotReport, SetsThePlanBesideTheMeasurements) {
  if (run("command -v gnuplot").exit_code != 0) GTEST_SKIP() << "gnuplot is not installed";
  HandMadeRun hand;
  const std::string metrics = hand.metrics, html = hand.html;
  Result r = run(kBin + "/plot --metrics " + metrics + " --html " + html + " --title 'tiny <on> H100'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "wrote " + html + ": 3 iterations (1 to 3)")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(html + ".svg"));
  const std::string page = trident::read_text_file(html, "report");

  const trident::Layout layout = trident::resolve_layout(hand.config, 2);
  trident::Hardware hardware;
  hardware.gpus = 2;
  hardware.device = trident::h100_profile();
  hardware.software = trident::trident_software_on_libtorch("2.11.0");
  const trident::PlanRow plan = trident::evaluate_layout(hand.config, layout, hardware);
  const double tokens = double(hand.config.batch.global_batch_size * hand.config.model.seq_length);
  const trident::MemoryEstimate memory = trident::estimate_memory(hand.config.model, hand.config.model.padded_vocab(1),
                                                                  layout, hand.config.precision, hardware.software);
  const double planned_gib = (memory.total() - memory.allowance) / trident::kGiB;
  EXPECT_TRUE(has(page, figure_row("iteration time (s)", plan.seconds(), "1.88", 1.8775 / plan.seconds()))) << page;
  EXPECT_TRUE(has(page, figure_row("tokens/s", tokens / plan.seconds(), "1100", 1100 * plan.seconds() / tokens)))
      << page;
  EXPECT_TRUE(has(page, figure_row("TFLOP/s per device (Megatron formula)", plan.tflops_per_gpu, "0.25",
                                   0.25 / plan.tflops_per_gpu)))
      << page;
  const double mfu = plan.tflops_per_gpu / hardware.device.peak_tflops;
  EXPECT_TRUE(has(page, figure_row("MFU (%)", 100 * mfu, "15", 0.15 / mfu))) << page;
  EXPECT_TRUE(has(page, figure_row("peak allocated memory per device (GiB)", planned_gib, "2.5", 2.5 / planned_gib)))
      << page;
  EXPECT_TRUE(has(page, "device profile: H100 80GB SXM. Measured: the median of 2 logged iteration(s)")) << page;
  EXPECT_TRUE(has(page, "<td>1</td><td>1</td><td>1</td><td>2</td>")) << "TP CP PP DP\n" << page;
  EXPECT_TRUE(has(page, "2 rank(s) on NVIDIA H100 80GB HBM3 (nccl)")) << page;
  EXPECT_TRUE(has(page, "<title>tiny &lt;on&gt; H100</title>")) << page;
  EXPECT_TRUE(has(page, "num_layers: 4")) << page;
  EXPECT_TRUE(has(page, "corpus&lt;1&gt;&amp;2")) << page;
  EXPECT_TRUE(has(page, "<figure>\n<svg")) << page;
  EXPECT_FALSE(has(page, "<?xml")) << page;
  EXPECT_TRUE(has(page, ">plan</text>")) << "the plan's line in the legend\n" << page;

  // A profile of the user's replaces the built-in one.
  trident::DeviceProfile mine = trident::a100_profile();
  mine.name = "my A100";
  const std::string profile = (hand.dir / "mine.yaml").string();
  trident::write_text_file(profile, trident::device_profile_yaml(mine));
  r = run(kBin + "/plot --metrics " + metrics + " --html " + html + " --profile " + profile);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(trident::read_text_file(html, "report"), "device profile: my A100.")) << r.output;
}

// Bad input, each one error: a record with a wrong field or a config its ranks cannot run, a
// profile without a report, a report with a PNG. A run without a record is reported without its
// plan, with a warning.
TEST(PlotReport, BadRecordsAndOptionsAreOneErrorEach) {
  if (run("command -v gnuplot").exit_code != 0) GTEST_SKIP() << "gnuplot is not installed";
  HandMadeRun hand;
  const std::string plot = kBin + "/plot --metrics " + hand.metrics + " --html " + hand.html;
  std::string text = trident::read_text_file(hand.record_path, "record");
  text.replace(text.find("\"world_size\": 2"), 15, "\"world_size\": \"two\"");
  trident::write_text_file(hand.record_path, text);
  Result r = run(plot);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "error: run record '" + hand.record_path + "': 'world_size' is missing or not an integer"))
      << r.output;

  hand.record.world_size = 3;  // a global batch of 16 in micro-batches of 8 over 3 data-parallel ranks
  trident::write_run_record(hand.record_path, hand.record);
  r = run(plot);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "error: run record '" + hand.record_path +
                                "': its config does not give a layout on 3 "
                                "rank(s): "))
      << r.output;

  std::filesystem::remove(hand.record_path);
  r = run(plot);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "warning: " + hand.metrics + ": no run record '" + hand.record_path +
                                "' beside it (a run from before train wrote one): no plan"))
      << r.output;
  EXPECT_FALSE(has(trident::read_text_file(hand.html, "report"), "<h3>Plan and measurement</h3>"));

  r = run(kBin + "/plot --metrics " + hand.metrics + " --profile x.yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "--profile requires --html")) << r.output;
  r = run(plot + " --output x.png");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "--output excludes --html")) << r.output;
  const std::string nowhere = (hand.dir / "missing" / "r.html").string();
  r = run(kBin + "/plot --metrics " + hand.metrics + " --html " + nowhere);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(
      r.output, "error: plot: '" + nowhere + "': its folder '" + (hand.dir / "missing").string() + "' does not exist"))
      << r.output;
}

namespace {

// Pixels of a PNG within `distance` of an RGB colour in each channel (libpng reads it).
int64_t pixels_of_colour(const std::string& path, int red, int green, int blue, int distance) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) trident::fail("cannot read '", path, "': ", image.message);
  image.format = PNG_FORMAT_RGB;
  std::vector<png_byte> pixels(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr))
    trident::fail("cannot decode '", path, "': ", image.message);
  int64_t count = 0;
  for (size_t at = 0; at + 2 < pixels.size(); at += 3)
    if (std::abs(pixels[at] - red) <= distance && std::abs(pixels[at + 1] - green) <= distance &&
        std::abs(pixels[at + 2] - blue) <= distance)
      ++count;
  return count;
}

// Headless Chromium on a page (its profile in `dir`): `what` it is asked for.
Result chromium(const std::filesystem::path& dir, const std::string& what, const std::string& page) {
  return run(str("timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir=",
                 (dir / "chromium").string(), " ", what, " file://", std::filesystem::absolute(page).string()));
}

// Its picture of the page, as a window 1000 pixels wide shows it.
Result screenshot(const std::filesystem::path& dir, const std::string& page, const std::string& png) {
  return chromium(dir, "--hide-scrollbars --window-size=1000,2600 --screenshot=" + png, page);
}

}  // namespace

// A real run: train writes its record (the resolved config, one rank on the CPU), plot --html
// reports it (no built-in profile for the CPU: memory only), and Chromium shows the page: its
// tables parsed, the loss curve drawn in the run's colour. The same page without its picture
// shows none of that colour, so the count is the picture's.
TEST(PlotReport, ARealRunsReportReadsInABrowser) {
  if (run("command -v gnuplot").exit_code != 0) GTEST_SKIP() << "gnuplot is not installed";
  const auto dir = scratch_dir();
  const std::string metrics = (dir / "run" / "metrics.jsonl").string(), html = (dir / "report.html").string();
  Result r = run(kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml data.type=synthetic train.iters=6 " +
                 "train.log_interval=1 train.eval_interval=3 train.eval_iters=1 train.metrics_file=" + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const trident::RunRecord record = trident::read_run_record((dir / "run" / "metrics.run.json").string());
  EXPECT_EQ(record.world_size, 1);
  EXPECT_EQ(record.device, "cpu");
  EXPECT_TRUE(has(r.output, "): " + trident::si_units(double(record.parameters)) + " parameters")) << r.output;
  const Config recorded = Config::parse(record.config_yaml);
  EXPECT_EQ(recorded.train.iters, 6) << "the overrides applied";
  EXPECT_EQ(str(recorded.data.type), "synthetic");

  r = run(kBin + "/plot --metrics " + metrics + " --html " + html);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string page = trident::read_text_file(html, "report");
  EXPECT_TRUE(has(page, "device profile: none built in for 'cpu', so no times")) << page;
  EXPECT_TRUE(has(page, "Measured: the median of 5 logged iteration(s)")) << page;

  if (run("command -v chromium").exit_code != 0) GTEST_SKIP() << "chromium is not installed";
  // The browser's own reading of the page: its parser adds the tables' <tbody>.
  r = chromium(dir, "--dump-dom", html);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "<tbody><tr><th></th><th>plan</th><th>measured</th>")) << r.output;
  EXPECT_TRUE(has(r.output, "<svg")) << r.output;

  const std::string shot = (dir / "report.png").string();
  r = screenshot(dir, html, shot);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // gnuplot's first colour (148, 0, 211): the loss, tokens/s and TFLOP/s curves of the run.
  const int64_t drawn = pixels_of_colour(shot, 148, 0, 211, 40);
  EXPECT_GT(drawn, 1000) << shot;

  std::string without = page;
  without.erase(without.find("<figure>"), without.find("</figure>") - without.find("<figure>"));
  const std::string bare = (dir / "bare.html").string(), bare_shot = (dir / "bare.png").string();
  trident::write_text_file(bare, without);
  r = screenshot(dir, bare, bare_shot);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(pixels_of_colour(bare_shot, 148, 0, 211, 40), 0) << bare_shot;
}
