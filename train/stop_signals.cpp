#include "train/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>

namespace trident {
namespace {

std::atomic<int> received{0};

// Only async-signal-safe calls here: write(2) and _exit.
void on_stop_signal(int signal) {
  int expected = 0;
  if (received.compare_exchange_strong(expected, signal)) return;
  static const char kInt[] = "error: a second stop signal (SIGINT): exiting now, without saving\n";
  static const char kTerm[] = "error: a second stop signal (SIGTERM): exiting now, without saving\n";
  ssize_t ignored = signal == SIGINT ? ::write(2, kInt, sizeof kInt - 1) : ::write(2, kTerm, sizeof kTerm - 1);
  (void)ignored;
  ::_exit(128 + signal);
}

}  // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal must not fail a read or write in progress
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int stop_signal() { return received.load(); }

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace trident
