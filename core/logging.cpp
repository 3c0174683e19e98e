#include "core/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "core/progress.h"

namespace trident::log {
namespace {
int this_rank = 0;
int world = 1;

// The rank log; lines may come from the watchdogs' threads too.
std::mutex file_mutex;
FILE* file = nullptr;
std::string file_path;
// The real stderr while a QuietStderr sends fd 2 to /dev/null (errors must still be seen: a
// watchdog may end the process inside a quiet section); -1 otherwise.
std::atomic<int> real_stderr{-1};

void to_file(const char* kind, const std::string& line) {
  std::lock_guard<std::mutex> lock(file_mutex);
  if (!file) return;
  std::fprintf(file, "%s %s%s\n", utc_now().c_str(), kind, line.c_str());
  std::fflush(file);
}
}  // namespace

void open_rank_log(const std::string& path, const std::string& setting) {
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  FILE* opened = std::fopen(path.c_str(), "a");
  if (!opened) fail(setting, ": cannot open the rank log '", path, "': ", std::strerror(errno));
  std::lock_guard<std::mutex> lock(file_mutex);
  if (file) std::fclose(file);
  file = opened;
  file_path = path;
}

void to_rank_log(const std::string& line) { to_file("", line); }

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return stamp;
}

std::string rank_log() {
  std::lock_guard<std::mutex> lock(file_mutex);
  return file_path;
}

void set_process(int rank, int world_size) {
  this_rank = rank;
  world = world_size;
}

bool primary() { return this_rank == 0; }

void info(const std::string& line) {
  to_file("", line);
  if (!primary()) return;
  print_over_progress(stdout, line + "\n");
}

void warn(const std::string& line) {
  to_file("warning: ", line);
  if (!primary()) return;
  print_over_progress(stderr, "warning: " + line + "\n");
}

void error(const std::string& line) {
  clear_progress_line();
  std::fflush(stdout);
  std::fflush(stderr);
  const int quiet_saved = real_stderr.load();
  const int fd = quiet_saved >= 0 ? quiet_saved : 2;
  if (world > 1)
    dprintf(fd, "error (rank %d): %s\n", this_rank, line.c_str());
  else
    dprintf(fd, "error: %s\n", line.c_str());
  to_file("error: ", line);
  if (const std::string log = rank_log(); !log.empty()) dprintf(fd, "  (rank %d's log: %s)\n", this_rank, log.c_str());
}

QuietStderr::QuietStderr() : saved_(::dup(2)) {
  std::fflush(stderr);
  real_stderr = saved_;
  const int null = ::open("/dev/null", O_WRONLY);
  ::dup2(null, 2);
  ::close(null);
}

QuietStderr::~QuietStderr() {
  std::fflush(stderr);
  ::dup2(saved_, 2);
  real_stderr = -1;
  ::close(saved_);
}

}  // namespace trident::log
