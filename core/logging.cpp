#include "core/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace trident::log {
namespace {
int this_rank = 0;
int world = 1;
}  // namespace

void set_process(int rank, int world_size) {
  this_rank = rank;
  world = world_size;
}

bool primary() { return this_rank == 0; }

void info(const std::string& line) {
  if (!primary()) return;
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void warn(const std::string& line) {
  if (!primary()) return;
  std::fprintf(stderr, "warning: %s\n", line.c_str());
}

void error(const std::string& line) {
  std::fflush(stdout);
  if (world > 1)
    std::fprintf(stderr, "error (rank %d): %s\n", this_rank, line.c_str());
  else
    std::fprintf(stderr, "error: %s\n", line.c_str());
  std::fflush(stderr);
}

QuietStderr::QuietStderr() : saved_(::dup(2)) {
  std::fflush(stderr);
  const int null = ::open("/dev/null", O_WRONLY);
  ::dup2(null, 2);
  ::close(null);
}

QuietStderr::~QuietStderr() {
  std::fflush(stderr);
  ::dup2(saved_, 2);
  ::close(saved_);
}

}  // namespace trident::log
