// Console output of a training run: one rank (the primary, rank 0) speaks; every rank may
// report its own error.
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
// with stdout and stderr flushed: it is printed before anything ends the job.
void error(const std::string& line);

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
