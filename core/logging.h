// Console output of a training run: one rank (the primary, rank 0) speaks; every rank may
// report its own error. With a rank log open, every rank also writes all it would say (the
// primary's lines too), time-stamped, to a file of its own.
#pragma once

#include <string>

namespace trident::log {

// Which process this is: rank 0 is the primary; errors name the rank when there are several.
void set_process(int rank, int world_size);
bool primary();
// A line on stdout from the primary rank, flushed.
void info(const std::string& line);
// "warning: ..." on stderr from the primary rank.
void warn(const std::string& line);
// "error (rank r): ..." (or "error: ..." in a job of one process) on stderr from this rank,
// with stdout and stderr flushed: it is printed before anything ends the job. With a rank log
// open, a second line names it.
void error(const std::string& line);

// From now on, this rank's lines also go to `path` (appended, created with its folder). Throws
// Error naming `setting` (the key that put the log there) and the file when it cannot be opened.
void open_rank_log(const std::string& path, const std::string& setting);
// A line for the rank log alone (nothing when none is open).
void to_rank_log(const std::string& line);
// The time now, UTC, ISO 8601 ("2026-11-28T12:00:00Z"), as the rank logs stamp their lines.
std::string utc_now();
// The open rank log's path, "" when none.
std::string rank_log();

// While it lives, this process's stderr goes to /dev/null: for libraries that log what the
// error trident reports says anyway (c10d's connection retries, SentencePiece's training).
class QuietStderr {
 public:
  QuietStderr();
  ~QuietStderr();
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_;
};

}  // namespace trident::log
