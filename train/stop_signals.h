// Stopping a run early without losing its work: SIGTERM (what SLURM sends before a job's time
// limit, and torchrun on shutdown) and SIGINT (Ctrl-C). After install_stop_signals(), the first
// such signal only records itself; Trainer::train() sees it at the end of the iteration (every
// rank agrees, so a signal to any rank stops all), saves a checkpoint and returns. A second
// signal ends the process at once, with 128 + its number.
#pragma once

namespace trident {

void install_stop_signals();
// The first stop signal received (SIGTERM, SIGINT), 0 while none came.
int stop_signal();
// "SIGTERM", "SIGINT".
const char* signal_name(int signal);

}  // namespace trident
