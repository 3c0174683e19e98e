// What a long step is doing and how far along it is, on the terminal: one line on stderr,
// redrawn in place ("saving checkpoint runs/x/iter_0000100: 45%, 1.2 GiB of 2.7 GiB, 3 s", cut to
// the terminal's width), from half a second into the step (a quick step draws nothing) four
// times a second, and cleared when the step ends, so the step's usual log line follows on a
// clean line. Nothing at all unless both stdout and stderr are the terminal (a log file, a pipe,
// `| tee`, CI, mpirun's forwarding), nor on ranks other than the primary: their output stays as
// it is. A log line printed meanwhile clears the line first (print_over_progress).
//
// TRIDENT_PROGRESS_DELAY_S (default 0.5) changes the half second: 0 draws each step from its
// start (the tests see every step's line that way).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
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

// Clears a progress line on the terminal, if one is drawn.
void clear_progress_line();
// Prints `text` on `stream` (flushed), a drawn progress line cleared first, in one step that no
// redraw comes between: logging's way to the terminal.
void print_over_progress(FILE* stream, const std::string& text);
// TRIDENT_PROGRESS_DELAY_S, checked: an error naming it unless it is seconds, 0 or more. Programs
// with long steps check it before their heavy work.
double progress_delay_s();

}  // namespace trident
