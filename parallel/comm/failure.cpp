#include "parallel/comm/failure.h"

#include <c10/util/Exception.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "parallel/comm/backends.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/flight_recorder.h"

namespace trident {

std::string describe(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

void agree(Communicator& group, const std::function<void()>& body) {
  std::string failure;
  bool failed = false;
  try {
    body();
  } catch (const std::exception& e) {
    failure = describe(e);
    failed = true;
  }
  // Each member's message length (-1: no failure), then the messages, padded to the longest.
  const int n = group.size();
  auto lengths = torch::empty({n}, torch::kLong);
  group.all_gather(lengths, torch::tensor({failed ? int64_t(failure.size()) : int64_t(-1)}));
  const int64_t longest = lengths.max().item<int64_t>();
  if (longest < 0) return;
  auto mine = torch::zeros({std::max<int64_t>(longest, 1)}, torch::kByte);
  std::copy(failure.begin(), failure.end(), mine.data_ptr<uint8_t>());
  auto all = torch::empty({n * mine.numel()}, torch::kByte);
  group.all_gather(all, mine);

  std::vector<JobError::Failure> failures;
  std::map<std::string, size_t> index;  // message -> its entry
  for (int r = 0; r < n; ++r) {
    const int64_t length = lengths[r].item<int64_t>();
    if (length < 0) continue;
    const auto* text = reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * mine.numel();
    std::string message(text, size_t(length));
    auto [at, fresh] = index.emplace(message, failures.size());
    if (fresh) failures.push_back({{}, message});
    failures[at->second].ranks.push_back(r);
  }
  throw JobError(std::move(failures), n);
}

std::shared_ptr<Communicator> join_job(const LaunchInfo& launch, std::chrono::seconds timeout,
                                       std::exception_ptr input_error) {
  CommOptions options;
  options.timeout = timeout;
  auto world = connect_world(launch, options);
  agree(*world, [&] {
    if (input_error) std::rethrow_exception(input_error);
  });
  return world;
}

int report_failure(const std::exception& e, int world_size) {
  if (const auto* job = dynamic_cast<const JobError*>(&e)) {
    log::to_rank_log(job->report());
    if (log::primary()) {
      std::fflush(stdout);
      std::fputs(job->report().c_str(), stderr);
      std::fflush(stderr);
    }
    return 2;
  }
  const int code = dynamic_cast<const Error*>(&e) ? 2 : 1;
  const std::string cause = describe(e);
  if (world_size == 1 || FlightRecorder::process().first_to_report(cause)) {
    log::error(cause);
    if (world_size > 1) end_job(code);
    return code;
  }
  // Another rank already said the same: this one keeps it for its log, and under MPI lets the
  // first one's MPI_Abort end it (two ranks aborting at once make Open MPI print its own errors).
  log::to_rank_log("error: " + cause);
#ifdef TRIDENT_WITH_MPI
  if (mpi_running()) std::this_thread::sleep_for(std::chrono::seconds(10));
#endif
  std::_Exit(code);
}

void ignore_broken_pipes() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

void stop_with_the_launcher() {
  const pid_t launcher = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return;
  if (::getppid() != launcher) std::_Exit(128 + SIGTERM);  // it exited before the request: no job left
}

void end_job(int exit_code) {
#ifdef TRIDENT_WITH_MPI
  if (mpi_running()) abort_mpi_job(exit_code);
#endif
  std::_Exit(exit_code);
}

}  // namespace trident
