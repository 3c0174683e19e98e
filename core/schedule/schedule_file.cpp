#include "core/schedule/schedule_file.h"

#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/files.h"

namespace trident {
namespace {

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r");
  return first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

}  // namespace

PipelineSchedule parse_schedule_file(const std::string& text, const std::string& path, PipelineSchedule placed) {
  const std::string origin = str("parallel.schedule_file ", path);
  static const std::regex action_pattern(R"(^(\d{1,9})([FBIW])(\d{1,9})$)");
  std::vector<std::vector<PipelineAction>> rows;
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (trimmed(line).empty() || trimmed(line)[0] == '#') continue;
    std::vector<PipelineAction> row;
    std::istringstream cells(line);
    std::string cell;
    for (int64_t cell_number = 1; std::getline(cells, cell, ','); ++cell_number) {
      const std::string action = trimmed(cell);
      if (action.empty()) continue;
      std::smatch match;
      if (!std::regex_match(action, match, action_pattern))
        throw Error(str(origin, " line ", number, ", cell ", cell_number, ": '", action,
                        "' is not an action (stage, F, B, I or W, micro-batch: 2F0)"));
      const char kind = match[2].str()[0];
      row.push_back({kind == 'F'   ? ActionKind::forward
                     : kind == 'B' ? ActionKind::backward
                     : kind == 'I' ? ActionKind::input_grad
                                   : ActionKind::weight_grad,
                     std::stoll(match[1]), std::stoll(match[3])});
    }
    rows.push_back(std::move(row));
  }
  if (int64_t(rows.size()) != placed.ranks())
    throw Error(str(origin, " has ", rows.size(), " rows of actions, one per pipeline rank, but parallel.pipeline is ",
                    placed.ranks()));
  placed.actions = std::move(rows);
  check_pipeline_schedule(placed, origin);
  return placed;
}

PipelineSchedule read_schedule_file(const std::string& path, const PipelineSchedule& placed) {
  return parse_schedule_file(read_text_file(path, "parallel.schedule_file"), path, placed);
}

PipelineSchedule run_pipeline_schedule(const Config& config, const Layout& layout) {
  if (!config.parallel.schedule_file.empty())
    return read_schedule_file(config.parallel.schedule_file, placed_schedule(layout));
  PipelineSchedule schedule = make_pipeline_schedule(layout);
  check_pipeline_schedule(schedule, str("parallel.schedule=", layout.schedule));
  return schedule;
}

std::string schedule_file_text(const PipelineSchedule& schedule) {
  std::string out;
  for (const auto& actions : schedule.actions) {
    std::string row;
    for (const auto& a : actions) row += (row.empty() ? "" : ",") + to_string(a);
    out += row + "\n";
  }
  return out;
}

}  // namespace trident
