#include "core/report/html_report.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/text.h"

namespace trident {

namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  return out;
}

std::string number(double value) {
  if (std::isnan(value)) return "&ndash;";
  char text[32];
  std::snprintf(text, sizeof text, std::fabs(value) >= 100 ? "%.0f" : "%.3g", value);
  return text;
}

std::string cells(const std::vector<std::string>& values, const char* tag = "td") {
  std::string out = "<tr>";
  for (const std::string& value : values) out += str("<", tag, ">", value, "</", tag, ">");
  return out + "</tr>\n";
}

std::string layout_table(const PlanComparison& c) {
  const Layout& l = c.layout;
  std::string out = "<table class=\"layout\">\n";
  out += cells({"TP", "CP", "PP", "DP", "EP", "ZeRO", "micro-batch", "micro-batches", "global batch", "sequence",
                "precision", "recompute", "schedule"},
               "th");
  out += cells({str(l.tp_size, l.sequence_parallel ? " (SP)" : ""), std::to_string(l.cp_size),
                str(l.pp_size, l.virtual_stages > 1 ? str(" x ", l.virtual_stages, " chunks") : ""),
                std::to_string(l.dp_size), std::to_string(l.ep_size), std::to_string(l.zero_stage),
                std::to_string(l.micro_batch), std::to_string(l.micro_batches),
                std::to_string(c.config.batch.global_batch_size), std::to_string(c.config.model.seq_length),
                str(c.config.precision), str(l.recompute), l.pp_size > 1 ? str(l.schedule) : "&ndash;"});
  return out + "</table>\n";
}

std::string plan_table(const PlanComparison& c) {
  std::string out = "<table class=\"plan\">\n";
  out += cells({"", "plan", "measured", "measured / plan"}, "th");
  const auto row = [&](const char* what, const PlannedAndMeasured& f, double scale = 1) {
    const double ratio = f.plan > 0 ? f.measured / f.plan : NAN;
    out += cells({what, number(f.plan * scale), number(f.measured * scale), number(ratio)});
  };
  row("iteration time (s)", c.iteration_s);
  row("tokens/s", c.tokens_per_s);
  row("TFLOP/s per device (Megatron formula)", c.tflops_per_device);
  row("MFU (%)", c.mfu, 100);
  row("peak allocated memory per device (GiB)", c.memory_gib);
  return out + "</table>\n";
}

std::string run_section(const ReportedRun& run) {
  const MetricsRows& rows = *run.rows;
  std::string out =
      str("<section class=\"run\">\n<h2>", escaped(run.label), "</h2>\n<p>", escaped(run.metrics_path), ": ",
          rows.size(), " iterations logged (", rows.begin()->first, " to ", rows.rbegin()->first, ")");
  if (!run.record) return out + str("; ", escaped(run.no_record), "</p>\n</section>\n");
  const RunRecord& r = *run.record;
  const PlanComparison& c = *run.comparison;
  out += str(", started ", escaped(r.started), "</p>\n<p>", r.world_size, " rank(s) on ", escaped(r.device), " (",
             escaped(r.backend), "), ", si_units(double(r.parameters)), " parameters; trident ", escaped(r.trident),
             ", LibTorch ", escaped(r.libtorch), "</p>\n");
  out += layout_table(c);
  out += str("<h3>Plan and measurement</h3>\n", plan_table(c));
  out +=
      str("<p class=\"note\">Plan: trident's time and memory models (<code>plan --explain</code>) for this "
          "layout, device profile: ",
          escaped(c.profile), ". Measured: the median of ", c.measured_lines,
          " logged iteration(s), the first left out (its warm-up); memory the largest peak of those.</p>\n");
  out += str("<details><summary>The resolved config</summary>\n<pre>", escaped(r.config_yaml),
             "</pre>\n</details>\n</section>\n");
  return out;
}

// gnuplot's SVG file without its XML prologue, to sit inside the page.
std::string inline_svg(const std::string& svg) {
  const size_t start = svg.find("<svg");
  if (start == std::string::npos) fail("gnuplot's SVG picture has no <svg> element");
  return svg.substr(start);
}

constexpr const char* kStyle = R"(body { font-family: sans-serif; max-width: 960px; margin: 2em auto; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td:first-child { text-align: left; }
.note { color: #555; font-size: 0.9em; } pre { background: #f7f7f7; padding: 0.5em; overflow-x: auto; }
figure { margin: 0; } figure svg { max-width: 100%; height: auto; })";

}  // namespace

std::string html_report(const std::string& title, const std::vector<ReportedRun>& runs, const std::string& svg) {
  std::string out =
      str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", escaped(title),
          "</title>\n<style>\n", kStyle, "\n</style>\n</head>\n<body>\n<h1>", escaped(title), "</h1>\n");
  for (const ReportedRun& run : runs) out += run_section(run);
  out += str("<section class=\"pictures\">\n<h2>Curves</h2>\n<figure>\n", inline_svg(svg), "</figure>\n</section>\n");
  return out + "</body>\n</html>\n";
}

}  // namespace trident
