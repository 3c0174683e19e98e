// A pipeline schedule's actions in a file (parallel.schedule_file): the CSV that
// torch.distributed.pipelining and torchtitan read and write for compute actions. Row r holds
// rank r's actions in order, separated by commas; an empty cell is idle time (skipped); a line
// that starts with # is a comment.
//
//   # parallel.schedule=zb-h1, 2 ranks, M = 3
//   0F0,0F1,0I0,0W0,0F2,0I1,0W1,0I2,0W2
//   1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1W2
//
// The placement stays parallel.schedule's (Layout::virtual_stage): the file orders the work,
// trident places the transfers (core/schedule/pipeline_program.h).
#pragma once

#include <string>

#include "core/schedule/pipeline_schedule.h"

namespace trident {

// The actions in `text` (read from `path`) on `placed`'s stages and micro-batches, checked with
// check_pipeline_schedule. Throws Error naming the file, line and cell at fault.
PipelineSchedule parse_schedule_file(const std::string& text, const std::string& path, PipelineSchedule placed);
// Reads `path` (parallel.schedule_file) and parses it.
PipelineSchedule read_schedule_file(const std::string& path, const PipelineSchedule& placed);
// The run's schedule: parallel.schedule_file's when it names one, else parallel.schedule's
// generator's, for `layout` (resolve_layout(config, ...)); checked either way.
PipelineSchedule run_pipeline_schedule(const Config& config, const Layout& layout);
// The file for `schedule`: one row per rank.
std::string schedule_file_text(const PipelineSchedule& schedule);

}  // namespace trident
