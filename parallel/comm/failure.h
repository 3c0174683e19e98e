// One failure path for the whole job: an error on any rank ends every rank in bounded time,
// with the failing rank's cause printed first and once.
//
// - Errors that every rank can check (setup, a checkpoint save) go through agree(): all ranks
//   learn every rank's outcome, rank 0 prints each distinct cause with the ranks that had it,
//   and all exit normally.
// - An error of one rank at run time (a bad token, a lost peer) is printed by that rank, which
//   then ends the job (end_job): MPI_Abort under MPI; otherwise it exits at once, and its peers,
//   waiting on it in a collective, see the connection close and fail too.
// - Silence (a stopped peer) ends in Gloo's own timeouts, and in the watchdog's for MPI
//   (parallel/comm/watchdog.h), after parallel.timeout_s.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace trident {

class Communicator;
struct LaunchInfo;

// The message of an exception, without the C++ backtrace LibTorch's errors carry.
std::string describe(const std::exception& e);

// Runs `body` on every member of `group` (a CPU communicator) and brings every member's
// outcome to all: returns when none failed; throws JobError on every member when any did.
// `body` must not communicate: a member failing before a collective in it would leave the
// others waiting there.
void agree(Communicator& group, const std::function<void()>& body);

// For programs that run on every rank: connects this process to the job's CPU world (see
// connect_world, within `timeout`) and agrees on `input_error`, what this rank's checks of its
// arguments and config threw (null for none): a mistake found on any rank ends every rank,
// printed once.
std::shared_ptr<Communicator> join_job(const LaunchInfo& launch, std::chrono::seconds timeout,
                                       std::exception_ptr input_error);

// Prints the failure that ends this program and returns its exit code (2 for failures trident
// diagnosed, 1 for anything else). A JobError is printed by rank 0 alone and every rank returns;
// any other error is this rank's own: printed with its rank, then, in a job of several
// processes, end_job() ends them all. When another rank of the job already reported the same
// cause (FlightRecorder::first_to_report), this rank stays silent (its log keeps the line).
int report_failure(const std::exception& e, int world_size);

// Makes a write to a socket whose peer is gone fail (EPIPE, which the communicator then reports
// as a closed connection) instead of raising SIGPIPE, whose default action ends the process
// without a word: a rank would vanish instead of saying why. A handler the program set for
// SIGPIPE is kept. Python ignores SIGPIPE likewise, so PyTorch's Gloo behaves so under torchrun.
void ignore_broken_pipes();

// Makes this rank receive SIGTERM when its launcher (mpirun, or Open MPI's daemon on another
// host) exits: a second Ctrl-C makes mpirun return at once, and its ranks would otherwise run on
// for seconds and publish checkpoints unasked. With the first stop signal already received, this
// is the second, which ends the rank at once (train/stop_signals.h); without, the rank stops as
// at a SIGTERM; when the launcher is gone already, the rank exits at once. Only for processes
// a launcher started: a run from a shell outlives the shell.
void stop_with_the_launcher();

// Ends every process of the job now, from the main thread, skipping destructors (they could
// wait on peers): MPI_Abort under MPI, else this process exits and its peers lose it.
[[noreturn]] void end_job(int exit_code);

}  // namespace trident
