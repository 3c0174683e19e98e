// What a long step is doing and how far along it is, on the terminal: one line on stderr,
// redrawn in place ("saving checkpoint runs/x/iter_0000100: 45%, 1.2 GiB of 2.7 GiB, 3 s"), from
// half a second into the step (a quick step draws nothing) four times a second, and cleared when
// the step ends, so the step's usual log line follows on a clean line. Nothing at all when
// stderr is not a terminal (a log file, a pipe, CI, mpirun's forwarding) or on ranks other than
// the primary: their output stays as it is. A log line printed meanwhile clears the line first.
//
// TRIDENT_PROGRESS_DELAY_S (default 0.5) changes the half second: 0 draws each step from its
// start (the tests see every step's line that way).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace trident {

class Progress {
 public:
  enum class Unit { items, bytes };
  // `total` 0: unknown, only the elapsed time is shown. `items`: what the count counts
  // ("tensors"), for Unit::items.
  Progress(std::string step, double total = 0, Unit unit = Unit::items, std::string items = "");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(double amount);

 private:
  void tick();
  std::string line() const;

  std::string step_, items_;
  double total_;
  Unit unit_;
  std::atomic<double> done_{0};
  double start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool finished_ = false;
  std::thread ticker_;
};

// Clears a progress line on the terminal, if one is drawn: logging calls it before each line.
void clear_progress_line();

}  // namespace trident
