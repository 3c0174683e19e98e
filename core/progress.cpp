#include "core/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/logging.h"
#include "core/text.h"

namespace trident {

namespace {

std::mutex terminal;  // the line on stderr, and whether one is drawn
bool drawn = false;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void clear_locked() {
  if (!drawn) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn = false;
}

// A line wider than the terminal would wrap, and clearing would then leave its first rows.
void draw(std::string line) {
  winsize size{};
  if (ioctl(2, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 && line.size() >= size.ws_col) line.resize(size.ws_col - 1);
  std::lock_guard<std::mutex> lock(terminal);
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
  drawn = true;
}

}  // namespace

double progress_delay_s() {
  static const double delay = [] {
    const char* text = std::getenv("TRIDENT_PROGRESS_DELAY_S");
    if (!text || !*text) return 0.5;
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (*end || !std::isfinite(seconds) || seconds < 0)
      fail("TRIDENT_PROGRESS_DELAY_S='", text, "': expected seconds, 0 or more");
    return seconds;
  }();
  return delay;
}

Progress::Progress(std::string step, double total, Unit unit, std::string items)
    : step_(std::move(step)), items_(std::move(items)), total_(total), unit_(unit), start_(now_s()) {
  const double delay = progress_delay_s();  // checked whether or not there is a terminal
  if (!isatty(1) || !isatty(2) || !log::primary()) return;
  if (delay == 0) draw(line());
  ticker_ = std::thread([this, delay] {
    std::unique_lock<std::mutex> lock(mutex_);
    for (double wait = delay; !wake_.wait_for(lock, std::chrono::duration<double>(wait), [&] { return finished_; });
         wait = 0.25)
      draw(line());
  });
}

Progress::~Progress() {
  if (!ticker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  wake_.notify_all();
  ticker_.join();
  clear_progress_line();
}

void Progress::advance(double amount) {
  double done = done_.load(std::memory_order_relaxed);
  while (!done_.compare_exchange_weak(done, done + amount, std::memory_order_relaxed)) {
  }
}

std::string Progress::line() const {
  const double done = done_.load(std::memory_order_relaxed);
  const auto amount = [&](double value) { return unit_ == Unit::bytes ? binary_bytes(value) : str(int64_t(value)); };
  std::string out = step_ + ": ";
  if (total_ > 0)
    out += str(int(100 * std::min(1.0, done / total_)), "%, ", amount(done), " of ", amount(total_),
               unit_ == Unit::items && !items_.empty() ? " " + items_ : "", ", ");
  return out + str(int64_t(now_s() - start_), " s");
}

void clear_progress_line() {
  std::lock_guard<std::mutex> lock(terminal);
  clear_locked();
}

void print_over_progress(FILE* stream, const std::string& text) {
  std::lock_guard<std::mutex> lock(terminal);
  clear_locked();
  std::fputs(text.c_str(), stream);
  std::fflush(stream);
}

}  // namespace trident
