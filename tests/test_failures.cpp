// Failure is part of the product: whatever goes wrong on whichever rank, the job ends in bounded
// time with the failing rank's cause printed first and once, and nothing already saved is lost.
// Every test runs the real `train` program as a user would, under mpirun or env://.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/config.h"
#include "core/files.h"
#include "parallel/comm/failure.h"
#include "tests/helpers.h"
#include "tests/launchers.h"
#include "train/checkpoint/checkpoint.h"
#include "train/data/samples.h"

using namespace trident;
using namespace trident::testing;
namespace fs = std::filesystem;

namespace {

// A model that trains in milliseconds per iteration.
const std::vector<std::string> kSmall = {
    "model.num_layers=2",        "model.hidden_size=32",      "model.num_attention_heads=2",
    "model.seq_length=32",       "batch.micro_batch_size=4",  "batch.global_batch_size=16",
    "train.log_interval=1",      "train.eval_interval=0",     "data.valid_fraction=0"};

std::string train_command(const std::string& launcher, const std::vector<std::string>& overrides) {
  std::string command = "timeout 120 " + launcher + kBin + "/train --config " + kSource + "/configs/gpt-tiny.yaml";
  for (const auto& o : kSmall) command += " " + o;
  for (const auto& o : overrides) command += " " + o;
  return command;
}

const std::vector<std::string> kSynthetic = {"data.type=synthetic"};

struct Timed {
  CommandResult result;
  double seconds;
};

Timed run_timed(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  CommandResult result = run_command(command);
  return {result, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// The error lines of a job's output, without launch_env.sh's "[rank r] " or launch_hosts.sh's
// "[host r] " prefix.
std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const bool prefixed = line.rfind("[rank ", 0) == 0 || line.rfind("[host ", 0) == 0;
    const size_t at = prefixed ? line.find("] ") + 2 : 0;
    if (line.compare(at, 5, "error") == 0) lines.push_back(line.substr(at));
  }
  return lines;
}

// The job ended by itself (not by the test's timeout), in failure, within `bound` seconds.
void expect_ended_in_failure(const Timed& run, double bound) {
  EXPECT_NE(run.result.exit_code, 0) << run.result.output;
  EXPECT_NE(run.result.exit_code, 124) << "timed out: the job hung\n" << run.result.output;
  EXPECT_LT(run.seconds, bound) << run.result.output;
  EXPECT_EQ(run.result.output.find("frame #"), std::string::npos) << "a C++ stack trace\n" << run.result.output;
}

// Random bytes below 200, with the byte 250 in the one sample that DP rank 1 of 2 reads first
// in iteration 3: with model.vocab_size=200 that rank alone, only then, meets a token outside the
// vocabulary.
std::string poisoned_corpus(const fs::path& dir, const std::vector<std::string>& overrides) {
  std::mt19937 random(1);
  std::string text(20000, '\0');
  for (char& c : text) c = char(1 + random() % 199);
  const std::string prefix = (dir / "corpus").string();
  write_documents(prefix, {text});
  std::vector<std::string> all = kSmall;
  all.insert(all.end(), overrides.begin(), overrides.end());
  all.push_back("data.path=" + prefix);
  const Config config = Config::load(kSource + "/configs/gpt-tiny.yaml", all);
  const GPTData data(config);
  const int64_t seq = config.model.seq_length, micro = config.batch.micro_batch_size;
  const int64_t position = sample_position(2 * config.batch.global_batch_size, 0, micro, 1, 2);
  std::vector<int64_t> tokens(size_t(seq + 1));
  data.train->sample(position, tokens.data());
  const std::string sample(tokens.begin(), tokens.end());
  const size_t at = text.find(sample);
  EXPECT_NE(at, std::string::npos);
  EXPECT_EQ(text.find(sample, at + 1), std::string::npos);
  text[at + size_t(seq / 2)] = char(250);  // in no other sample: neighbours share only the ends
  write_documents(prefix, {text});
  return prefix;
}

// Whether this machine lets a test mount a tmpfs in a private mount namespace (root in CI).
bool can_mount_tmpfs(const fs::path& dir) {
  fs::create_directories(dir);
  return run_command("unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs " + dir.string() + "'").exit_code == 0;
}

// Runs `command` with a tmpfs (`options`, e.g. size=1m) mounted at `dir` in a private mount
// namespace, then prints what it left there (the mount ends with the command).
CommandResult with_tmpfs(const fs::path& dir, const std::string& options, const std::string& command) {
  const std::string d = dir.string();
  return run_command("unshare -m sh -c 'mount -t tmpfs -o " + options + " tmpfs " + d + " || exit 77; " +
                     command + "; code=$?; echo left: $(ls -A " + d + "); echo latest: $(cat " + d +
                     "/latest 2>/dev/null); exit $code'");
}

// A single-process run of `iters` (e.g. "train.iters=4") that saves every 2 iterations into `ckpt`.
std::string saving_command(const fs::path& ckpt, const std::string& iters) {
  return train_command("", {"data.type=synthetic", "train.save_interval=2", "train.checkpoint_dir=" + ckpt.string(), iters});
}

}  // namespace

// Under mpirun the failing rank prints its cause and ends the job (nobody waits in a
// collective or in MPI_Finalize): Open MPI's mpirun ends it on the rank's failed exit, or, told
// not to (orte_abort_on_non_zero_status=0), on its MPI_Abort. Under env:// the rank exits and
// its peers see the connection close.
TEST(JobFailure, OneRanksErrorEndsTheJobWithThatRanksCause) {
  const std::vector<std::string> data = {"model.vocab_size=200", "train.iters=6"};
  std::vector<std::string> overrides = data;
  overrides.push_back("data.path=" + poisoned_corpus(scratch_dir(), data));
  const std::string mpi_abort = "env OMPI_MCA_orte_abort_on_non_zero_status=0 ";
  for (const std::string launcher : {kMpirun + "2 ", mpi_abort + kMpirun + "2 ", kEnvLaunch + "2 -- "}) {
    SCOPED_TRACE(launcher);
    const bool told_to_abort = launcher.rfind(mpi_abort, 0) == 0;
    if (!missing_backend(told_to_abort ? launcher.substr(mpi_abort.size()) : launcher).empty()) continue;
    const Timed run = run_timed(train_command(launcher, overrides));
    expect_ended_in_failure(run, 60);
    const auto errors = error_lines(run.result.output);
    ASSERT_FALSE(errors.empty()) << run.result.output;
    const std::string cause = "error (rank 1): token id 250 at position ";
    if (launcher.find(kMpirun) != std::string::npos) {
      EXPECT_EQ(errors.size(), 1u) << run.result.output;  // mpirun ends rank 0 silently
      EXPECT_EQ(errors.front().rfind(cause, 0), 0u) << run.result.output;
    } else {
      EXPECT_NE(run.result.output.find("[rank 1] " + cause), std::string::npos) << run.result.output;
      // Rank 0 waits in the gradients' all-reduce or in the world's end-of-iteration agreement.
      EXPECT_NE(run.result.output.find("[rank 0] error (rank 0): gloo all_reduce on the "), std::string::npos)
          << run.result.output;
      EXPECT_NE(run.result.output.find(" group: a peer closed its connection"), std::string::npos) << run.result.output;
    }
    EXPECT_NE(run.result.output.find("iter 2/6"), std::string::npos) << "failed too early\n" << run.result.output;
  }
}

// A write to a socket whose peer is gone fails with EPIPE once ignore_broken_pipes() ran (the
// Gloo world runs it); with SIGPIPE's default action the process would end without a word, as
// rank 0 above did now and then under env:// when its write came before its read of the closed
// connection. A handler of the program's own is kept.
namespace {
void own_handler(int) {}
}  // namespace
TEST(JobFailure, AWriteToAGonePeerFailsInsteadOfEndingTheProcess) {
  ignore_broken_pipes();
  int sockets[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  ::close(sockets[1]);
  const char byte = 0;
  errno = 0;
  EXPECT_EQ(::write(sockets[0], &byte, 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(sockets[0]);

  std::signal(SIGPIPE, own_handler);
  ignore_broken_pipes();
  struct sigaction kept {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &kept), 0);
  EXPECT_EQ(kept.sa_handler, &own_handler);
  std::signal(SIGPIPE, SIG_DFL);
}

// Every rank meets a token outside the vocabulary in its first sample: the job prints the cause
// once (the first rank to fail claims it beside the logs, the others stay silent) and Open MPI
// adds none of its own errors (one rank ends the job; with MPI_Abort, Open MPI 4.1 printed
// ORTE_ERROR_LOG lines in about one run in six).
TEST(JobFailure, AnErrorEveryRankHitsIsPrintedOnce) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  write_documents((dir / "corpus").string(), {std::string(20000, char(250))});
  const Timed run = run_timed(train_command(kMpirun + "2 ", {"model.vocab_size=200", "data.path=" + (dir / "corpus").string(),
                                                             "train.log_dir=" + (dir / "logs").string()}));
  expect_ended_in_failure(run, 60);
  const auto errors = error_lines(run.result.output);
  ASSERT_EQ(errors.size(), 1u) << run.result.output;
  EXPECT_NE(errors.front().find(": token id 250 at position "), std::string::npos) << run.result.output;
  EXPECT_EQ(run.result.output.find("ORTE_ERROR_LOG"), std::string::npos) << run.result.output;
}

// A checkpoint shard of TP rank 1 with one byte changed: rank 1 alone finds it while resuming;
// every rank agrees on it before anything trains, and rank 0 prints rank 1's cause once.
TEST(JobFailure, ABrokenShardOfOneRankIsReportedOnceBeforeTraining) {
  const auto dir = scratch_dir();
  for (const std::string launcher : {kMpirun + "2 ", kEnvLaunch + "2 -- "}) {
    SCOPED_TRACE(launcher);
    if (!missing_backend(launcher).empty()) continue;
    const std::string ckpt = (dir / (launcher == kMpirun + "2 " ? "mpi" : "env")).string();
    std::vector<std::string> overrides = {"data.type=synthetic", "parallel.tensor=2", "train.checkpoint_dir=" + ckpt};
    auto first = overrides;
    first.push_back("train.iters=2");
    ASSERT_EQ(run_command(train_command(launcher, first)).exit_code, 0);
    const std::string shard = CheckpointStore(ckpt).path(2) + "/" + model_file(1, 0);
    {
      std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(std::streamoff(fs::file_size(shard) / 2));
      file.put('\x7f');
    }
    overrides.push_back("train.iters=4");
    const Timed run = run_timed(train_command(launcher, overrides));
    expect_ended_in_failure(run, 60);
    const auto errors = error_lines(run.result.output);
    ASSERT_EQ(errors.size(), 1u) << run.result.output;
    EXPECT_EQ(errors.front().rfind("error (rank 1): checkpoint file '" + shard + "' is corrupt", 0), 0u)
        << run.result.output;
    EXPECT_EQ(run.result.output.find("resumed from"), std::string::npos) << run.result.output;
    EXPECT_EQ(run.result.output.find("iter "), std::string::npos) << run.result.output;
  }
}

// A mistake every rank finds (config, layout) is printed once, whichever rank exits first
// (mpirun may kill rank 0 before it prints: repeated, since a race shows only sometimes).
TEST(JobFailure, InputErrorsArePrintedOnceUnderEveryLauncher) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    for (const std::string launcher : {kMpirun + "4 ", kEnvLaunch + "2 -- "}) {
      SCOPED_TRACE(launcher);
      if (!missing_backend(launcher).empty()) continue;
      const auto r = run_command(train_command(launcher, {"data.type=synthetic", "parallel.pipeline=3"}));
      EXPECT_NE(r.exit_code, 0);
      const auto errors = error_lines(r.output);
      ASSERT_EQ(errors.size(), 1u) << r.output;
      EXPECT_EQ(errors.front(), "error: model.num_layers (2) must be divisible by parallel.pipeline * "
                                "parallel.virtual_stages (3)") << r.output;
    }
  }
}

// SIGSTOP on one rank: the others' watchdog (MPI) or Gloo's own timeout ends the job after
// parallel.timeout_s, whichever collective they wait in: with ZeRO-3 mostly a block's
// all-gather (started ahead as a prefetch, waited for when the block runs).
// The rank that waited names the silent one from the flight records (parallel/comm/flight_recorder.h).
TEST(JobFailure, AStoppedPeerEndsTheJobAfterTheTimeout) {
  const auto dir = scratch_dir();
  const std::string silent = "left no flight record within 5 s: stopped, stuck outside communication, or cut off";
  for (const std::string zero : {"parallel.zero_stage=0", "parallel.zero_stage=3"}) {
    SCOPED_TRACE(zero);
    const std::string endless = train_command("", {"data.type=synthetic", "train.iters=1000000", zero,
                                                   "train.log_interval=100000", "parallel.timeout_s=4",
                                                   "train.log_dir=" + (dir / zero).string()});
    const std::string command = endless.substr(std::string("timeout 120 ").size());
    if (missing_backend(kMpirun).empty()) {
      // The job is marked by a seed nobody else uses; pkill -n picks its newest process, a rank,
      // stopped once the job trains (its first iteration logged: a slow start, as under ASan on a
      // loaded machine, would otherwise stop a rank before the flight records are kept).
      const std::string log = (dir / zero / "rank-0.log").string();
      const Timed run = run_timed("timeout 120 bash -c '" + kMpirun + "2 " + command +
                                  " train.seed=515151 & job=$!; for i in $(seq 300); do grep -qs \"memory on rank 0\" " +
                                  log + " && break; sleep 0.2; done; sleep 1; pkill -STOP -n -f train.seed=515151; "
                                  "wait $job'");
      expect_ended_in_failure(run, 60);
      // Which group's call waits depends on where the peer stopped (ZeRO adds the world's norm).
      EXPECT_NE(run.result.output.find(" group made no progress for 4 s (parallel.timeout_s): a peer is stopped, "
                                       "stuck or lost"),
                std::string::npos) << run.result.output;
      EXPECT_NE(run.result.output.find(silent), std::string::npos) << run.result.output;
    }
    // Gloo's own timeouts do not depend on the ZeRO stage: one run (each takes 13 s).
    if (missing_backend(kEnvLaunch).empty() && zero == "parallel.zero_stage=0") {
      // Stopped once the job trains, as above (its logs in a folder of their own).
      const std::filesystem::path logs = dir / "gloo";
      const Timed run = run_timed("timeout 120 " + kEnvLaunch + "2 --kill-rank 1 --once " + (logs / "rank-0.log").string() +
                                  " 'memory on rank 0' --after 1 --signal STOP -- " + command + " train.log_dir=" +
                                  logs.string());
      expect_ended_in_failure(run, 60);
      EXPECT_NE(run.result.output.find(" group: no answer from a peer within parallel.timeout_s=4 s"),
                std::string::npos) << run.result.output;
      EXPECT_NE(run.result.output.find("[rank 0] error (rank 0): gloo "), std::string::npos) << run.result.output;
      EXPECT_NE(run.result.output.find("; rank 1 " + silent), std::string::npos) << run.result.output;
    }
  }
}

// A link cut between two hosts: each rank names the other as unreachable (the peer's address from
// its flight record does not answer), within parallel.timeout_s and the few seconds they spend on
// each other's records, whether the peer waits in the same operation or, its last bytes lost, in
// the one before. The two lines say the same, numbers aside, unless one rank waited in a send and
// the other in a receive: the second to fail then stays silent (FlightRecorder::first_to_report).
TEST(JobFailure, ACutLinkEndsTheJobAcrossHosts) {
  if (const std::string why = missing_backend(kHostsLaunch); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  // Cut once the job trains (its first iteration logged): a slow start, as under ASan on a loaded
  // machine, would otherwise lose the link before the ranks had met.
  const std::string log = (dir / "rank-0.log").string();
  const Timed run = run_timed("timeout 120 " + kHostsLaunch + "2 --cut-link 1 --once " + log +
                              " 'memory on rank 0' --after 1 -- " +
                              train_command("", {"data.type=synthetic", "train.iters=1000000", "parallel.timeout_s=4",
                                                 "train.log_interval=100000", "train.log_dir=" + dir.string()})
                                  .substr(std::string("timeout 120 ").size()));
  expect_ended_in_failure(run, 30);
  const auto lines = error_lines(run.result.output);
  ASSERT_GE(lines.size(), 1u) << run.result.output;
  ASSERT_LE(lines.size(), 2u) << run.result.output;
  for (const auto& line : lines) {
    EXPECT_NE(line.find("no answer from a peer within parallel.timeout_s=4 s"), std::string::npos) << line;
    EXPECT_NE(line.find("; this rank was in #"), std::string::npos) << line;
    const bool rank0 = line.rfind("error (rank 0)", 0) == 0;
    // "(10.77.0.2)", or "(10.77.0.2, at #164 all_reduce, finished)" when the peer is behind.
    EXPECT_NE(line.find(rank0 ? "unreachable from this rank: rank 1 (10.77.0.2" : "unreachable from this rank: rank 0 (10.77.0.1"),
              std::string::npos) << line;
  }
}

namespace {

// `command` (a program of kBin and its arguments) on `ranks` ranks, one of them killed a second
// after the job printed `started` (its ranks have met: one killed before would test nothing under
// mpirun and, under env://, leave the others waiting parallel.timeout_s for it to join). Under
// mpirun the newest rank, a process whose command line is the program's with `marker` (an
// argument nobody else uses; not mpirun's, which a kill would orphan its ranks by, nor the
// shell's); under env:// rank 1. Each job must end by itself, within a minute; under env:// a
// survivor names `operation` (Gloo's) as the one a peer's closed connection broke.
void expect_a_killed_peer_ends_the_job(int ranks, const std::string& command, const std::string& marker,
                                       const std::string& started, const std::string& operation) {
  const std::string n = std::to_string(ranks);
  if (missing_backend(kMpirun).empty()) {
    const std::string rank = "^" + command.substr(0, command.find(' ')) + " .*" + marker;
    const std::string said = (scratch_dir() / "said").string();
    const Timed run = run_timed("timeout 120 bash -c 'set -o pipefail; (" + kMpirun + n + " " + command +
                                " 2>&1 | tee " + said + ") & job=$!; for i in $(seq 600); do grep -qsF \"" +
                                started + "\" " + said + " && break; sleep 0.2; done; sleep 1; pkill -KILL -n -f \"" +
                                rank + "\"; wait $job'");
    expect_ended_in_failure(run, 60);
    EXPECT_NE(run.result.output.find(started), std::string::npos) << run.result.output;
  }
  if (missing_backend(kEnvLaunch).empty()) {
    const Timed run = run_timed("timeout 120 " + kEnvLaunch + n + " --kill-rank 1 --once-said '" + started +
                                "' --after 1 -- " + command);
    expect_ended_in_failure(run, 60);
    EXPECT_NE(run.result.output.find("): gloo " + operation + " on the "), std::string::npos)
        << run.result.output;
    EXPECT_NE(run.result.output.find(" group: a peer closed its connection"), std::string::npos) << run.result.output;
  }
}

}  // namespace

// Which group's all-reduce notices depends on when the peer died (the data-parallel gradients,
// or the world's end-of-iteration agreement).
TEST(JobFailure, AKilledPeerEndsTheJob) {
  const std::string command = train_command("", {"data.type=synthetic", "train.iters=1000000",
                                                 "train.log_interval=100000", "train.seed=424242"});
  expect_a_killed_peer_ends_the_job(2, command.substr(std::string("timeout 120 ").size()), "train.seed=424242",
                                    "memory on rank 0", "all_reduce");
}

// A peer killed among all-to-alls (Ulysses' exchange, where every rank sends to every other at
// once) ends the job as one killed among all-reduces does, naming the operation it broke. Three
// ranks, so that the survivors also wait on each other.
TEST(JobFailure, AKilledPeerEndsTheJobInAnAllToAll) {
  const std::string bench = kBin + "/allreduce_bench --op all_to_all --min-bytes 1M --max-bytes 1M --warmup 0 "
                                   "--iters 100000007";
  expect_a_killed_peer_ends_the_job(3, bench, "iters 100000007", "# allreduce_bench: 3 ranks", "all_to_all");
}

// A process of an env:// job whose peers never come ends after parallel.timeout_s (not twice
// that), with one line: no stack trace, no glog.
TEST(JobFailure, AMissingPeerEndsTheConnectionAfterTheTimeout) {
  if (!missing_backend(kEnvLaunch).empty()) GTEST_SKIP() << missing_backend(kEnvLaunch);
  const std::string port = std::to_string(20000 + ::getpid() % 12000);  // below the ephemeral ports
  const std::string command = train_command("", {"data.type=synthetic", "parallel.timeout_s=3"});
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " ";
  // The timeout, and room for the program's start, as long as this build's takes on this machine
  // now (several seconds under AddressSanitizer on a loaded machine).
  const double bound = 3 + 3 * run_timed(kBin + "/train --version").seconds + 5;
  Timed run = run_timed(env + "RANK=0 " + command);  // the TCPStore's server, alone
  expect_ended_in_failure(run, bound);
  EXPECT_EQ(run.result.output, "error (rank 0): only 1 of 2 processes reached the TCPStore at MASTER_ADDR="
                               "127.0.0.1 MASTER_PORT=" + port + " within parallel.timeout_s=3 s (one "
                               "failed to start, or they were given different MASTER_ADDR/MASTER_PORT)\n");
  run = run_timed(env + "RANK=1 " + command);  // a client, with no server
  expect_ended_in_failure(run, bound);
  EXPECT_EQ(run.result.output.rfind("error (rank 1): cannot reach the TCPStore at MASTER_ADDR=127.0.0.1 "
                                    "MASTER_PORT=" + port + " within parallel.timeout_s=3 s: ", 0), 0u)
      << run.result.output;
  EXPECT_EQ(error_lines(run.result.output).size(), 1u) << run.result.output;
}

// Across hosts, Gloo must not bind to loopback: its peers would be told to connect to their own
// host. Forced by GLOO_SOCKET_IFNAME, or by a MASTER_ADDR that the host name's loopback entry in
// /etc/hosts resolves (Debian's default), each rank says so at once, naming both.
TEST(JobFailure, AcrossHostsLoopbackIsRefusedNamingTheInterfaceAndMasterAddr) {
  if (const std::string why = missing_backend(kHostsLaunch); !why.empty()) GTEST_SKIP() << why;
  const std::string command = train_command(kHostsLaunch + "2 -- env GLOO_SOCKET_IFNAME=lo ", kSynthetic);
  Timed run = run_timed(command);
  expect_ended_in_failure(run, 10);
  const auto lines = error_lines(run.result.output);
  ASSERT_EQ(lines.size(), 2u) << run.result.output;  // one per host: neither can reach the other
  for (const auto& line : lines)
    EXPECT_NE(line.find("would connect to its peers from the loopback interface lo (127.0.0.1, GLOO_SOCKET_IFNAME), "
                        "but the job spans hosts (WORLD_SIZE=2, LOCAL_WORLD_SIZE=1)"),
              std::string::npos) << line;

  run = run_timed(train_command(kHostsLaunch + "2 -- bash -c 'MASTER_ADDR=$(hostname) exec \"$0\" \"$@\"' ", kSynthetic));
  expect_ended_in_failure(run, 10);
  EXPECT_NE(run.result.output.find("from the loopback interface lo (127.0.0.1, the route to MASTER_ADDR="),
            std::string::npos) << run.result.output;
}

// A loss that spikes or goes to nan stops the program (exit 2, one line naming the iteration).
TEST(JobFailure, DivergenceEndsTheProgramWithOneLine) {
  const Timed run = run_timed(train_command("", {"data.type=synthetic", "train.iters=20", "optimizer.lr=1e6"}));
  expect_ended_in_failure(run, 60);
  EXPECT_EQ(run.result.exit_code, 2);
  const auto errors = error_lines(run.result.output);
  ASSERT_EQ(errors.size(), 1u) << run.result.output;
  EXPECT_EQ(errors.front().rfind("error: iteration ", 0), 0u) << run.result.output;
  EXPECT_NE(errors.front().find("training diverged; stopped before saving anything at this iteration "
                                "(no checkpoint was saved)"), std::string::npos) << run.result.output;
}

// `train` killed (SIGKILL: no cleanup) at each file step of a save in turn
// (core/fault_injection.h): the checkpoint before stays byte for byte, and the same command
// resumes, from the killed save's folder when it was published before `latest` moved (saying
// so), else from the one before.
TEST(JobFailure, AKillAtAnyStepOfASaveLosesNothingAndTheSameCommandResumes) {
  const auto dir = scratch_dir();
  const std::string base = (dir / "base").string(), ckpt = (dir / "ckpt").string();
  const std::vector<std::string> tiny = {"data.type=synthetic", "model.num_layers=1", "batch.global_batch_size=4",
                                         "train.log_interval=100"};
  auto overrides = [&](int64_t iters) {
    std::vector<std::string> all = tiny;
    all.push_back("train.iters=" + std::to_string(iters));
    all.push_back("train.checkpoint_dir=" + ckpt);
    return all;
  };
  auto command = [&](int64_t iters) { return train_command("", overrides(iters)); };
  ASSERT_EQ(run_command(command(1)).exit_code, 0);
  fs::rename(ckpt, base);
  const std::string first = "iter_0000001/model_tp0_pp0.safetensors";
  const std::string before = read_text_file(base + "/" + first, "checkpoint");
  bool resumed_from_the_killed_save = false;
  int64_t n = 1;
  for (;; ++n) {
    ASSERT_LT(n, 60) << "more steps than expected";
    remove_tree(ckpt);
    fs::copy(base, ckpt, fs::copy_options::recursive);
    const CommandResult killed = run_command("TRIDENT_FAULT_AT=" + std::to_string(n) + ":kill " + command(2));
    if (killed.exit_code == 0) break;  // past the last step
    EXPECT_TRUE(killed.exit_code == 137 || killed.exit_code == -1) << n << "\n" << killed.output;
    EXPECT_EQ(read_text_file(ckpt + "/" + first, "checkpoint"), before) << n;
    const bool published = fs::exists(ckpt + "/iter_0000002") && CheckpointStore(ckpt).latest() == 1;
    if (!published) {  // killed before its folder was in place, or after `latest` moved
      std::vector<std::string> all = kSmall;
      for (const auto& o : overrides(2)) all.push_back(o);
      const auto point = find_resume_point(CheckpointStore(ckpt), Config::load(kSource + "/configs/gpt-tiny.yaml", all));
      ASSERT_TRUE(point.has_value()) << n;
      EXPECT_EQ(point->interrupted, "") << n;
      continue;
    }
    const CommandResult again = run_command(command(2));
    EXPECT_EQ(again.exit_code, 0) << n << "\n" << again.output;
    EXPECT_NE(again.output.find("warning: resuming from " + ckpt + "/iter_0000002, the newest complete checkpoint"),
              std::string::npos) << again.output;
    EXPECT_EQ(CheckpointStore(ckpt).latest(), 2);
    resumed_from_the_killed_save = true;
  }
  EXPECT_GE(n, 15);
  EXPECT_TRUE(resumed_from_the_killed_save);
}

// A checkpoint directory that cannot be written is reported before training, not at the first
// save (by default after the whole run).
TEST(JobFailure, AnUnwritableCheckpointDirectoryIsReportedBeforeTraining) {
  const auto dir = scratch_dir();
  std::ofstream(dir / "a-file") << "not a directory";
  auto r = run_command(train_command("", {"data.type=synthetic", "train.checkpoint_dir=" + (dir / "a-file").string()}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  auto errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_EQ(errors.front().rfind("error: train.checkpoint_dir '" + (dir / "a-file").string() + "' cannot be created: ", 0), 0u)
      << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << r.output;

  const fs::path read_only = dir / "read-only";
  if (!can_mount_tmpfs(read_only)) GTEST_SKIP() << "this machine does not allow mounting a tmpfs";
  r = with_tmpfs(read_only, "ro,size=1m",
                 train_command("", {"data.type=synthetic", "train.checkpoint_dir=" + read_only.string()}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_EQ(errors.front(), "error: train.checkpoint_dir '" + read_only.string() + "' is not writable: cannot create '" +
                                read_only.string() + "/.write-test-rank0': Read-only file system") << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << r.output;
}

// The disk fills up during a save: one line names the file and the cause, the half-written
// checkpoint is removed and `latest` still names the previous one.
TEST(JobFailure, ADiskFullDuringASaveKeepsTheLatestCheckpoint) {
  const fs::path ckpt = scratch_dir() / "ckpt";
  if (!can_mount_tmpfs(ckpt)) GTEST_SKIP() << "this machine does not allow mounting a tmpfs";
  auto with = [&](const std::string& iters) { return saving_command(ckpt, iters); };
  // A disk that holds one checkpoint and a half: the second save runs out of space.
  ASSERT_EQ(run_command(with("train.iters=2")).exit_code, 0);
  uintmax_t one_checkpoint = 0;
  for (const auto& entry : fs::recursive_directory_iterator(ckpt))
    if (entry.is_regular_file()) one_checkpoint += entry.file_size();
  fs::remove_all(ckpt);
  fs::create_directories(ckpt);
  const auto r = with_tmpfs(ckpt, "size=" + std::to_string(one_checkpoint * 3 / 2 / 1024) + "k", with("train.iters=4"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const auto errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_EQ(errors.front().rfind("error: writing '" + ckpt.string() + "/.staging-iter_0000004/", 0), 0u) << r.output;
  EXPECT_NE(errors.front().find("' failed: No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("left: iter_0000002 latest\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("latest: iter_0000002\n"), std::string::npos) << r.output;
}

// The same with a write that fails on a file-size limit (EFBIG), on any machine, written in the
// foreground or in the background (train.async_save: the failure is reported when the save is
// published): the next run resumes from the checkpoint that was kept and reaches the end. The
// limit's signal (SIGXFSZ), which ends a process silently by default, is the program's to ignore.
TEST(JobFailure, AFailedWriteKeepsTheLatestCheckpointAndTheRunResumes) {
  for (const std::string async : {"train.async_save=false", "train.async_save=true"}) {
    SCOPED_TRACE(async);
    const auto dir = scratch_dir();
    auto with = [&](const std::string& iters) { return saving_command(dir / "ckpt", iters) + " " + async; };
    ASSERT_EQ(run_command(with("train.iters=2")).exit_code, 0);
    // Files up to 200 KiB: the model's shard fits, the optimizer's does not.
    const auto r = run_command("bash -c 'ulimit -f 200; exec " + with("train.iters=4") + "'");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const auto errors = error_lines(r.output);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    const std::string shard = CheckpointStore((dir / "ckpt").string()).staging_path(4) + "/" + optimizer_file(0, 0, 0);
    EXPECT_EQ(errors.front(), "error: writing '" + shard + "' failed: File too large") << r.output;
    std::vector<std::string> left;
    for (const auto& entry : fs::directory_iterator(dir / "ckpt")) left.push_back(entry.path().filename().string());
    std::sort(left.begin(), left.end());
    EXPECT_EQ(left, (std::vector<std::string>{"iter_0000002", "latest"}));
    const auto resumed = run_command(with("train.iters=4"));
    EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " + (dir / "ckpt/iter_0000002").string()), std::string::npos) << resumed.output;
  }
}

// train.async_save writes the very checkpoint a synchronous save writes (the files byte for byte),
// while training goes on, and says how long training stopped for it.
TEST(Checkpoints, ABackgroundSaveWritesWhatASynchronousSaveWrites) {
  const auto dir = scratch_dir();
  for (const std::string async : {"false", "true"}) {
    const auto r = run_command(saving_command(dir / async, "train.iters=6") + " train.async_save=" + async);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (async == "true") {
      EXPECT_NE(r.output.find("checkpoint " + (dir / "true/iter_0000004").string() + ": training stopped "),
                std::string::npos) << r.output;
      EXPECT_NE(r.output.find("saved checkpoint " + (dir / "true/iter_0000004").string() +
                              ": written in the background in "), std::string::npos) << r.output;
    }
  }
  for (const std::string checkpoint : {"iter_0000004", "iter_0000006"})
    for (const auto& file : fs::directory_iterator(dir / "false" / checkpoint)) {
      if (file.path().extension() != ".safetensors") continue;  // progress.yaml holds each run's config
      EXPECT_EQ(read_text_file(file.path().string(), "file"), read_text_file((dir / "true" / checkpoint / file.path().filename()).string(), "file")) << file.path();
    }
}

// SIGTERM (SLURM's warning before the time limit) to one rank, or train.exit_after_minutes: every
// rank finishes the iteration, the job saves, says so in one line and exits with 143 (3 for the
// time limit); the same command resumes from there. Under env:// and mpirun (signalling a rank,
// as SLURM signals every task).
TEST(JobFailure, AStopSignalOrTimeLimitSavesAndExitsWithItsCode) {
  const auto dir = scratch_dir();
  auto endless = [&](const fs::path& ckpt, const std::string& seed) {
    return train_command("", {"data.type=synthetic", "train.iters=1000000", "train.log_interval=100000",
                              "train.checkpoint_dir=" + ckpt.string(), "train.seed=" + seed})
        .substr(std::string("timeout 120 ").size());
  };
  auto expect_stopped = [&](const Timed& run, const fs::path& ckpt, const std::string& by, int code) {
    EXPECT_EQ(run.result.exit_code, code) << run.result.output;
    const size_t at = run.result.output.find("stopped by " + by + " after iteration ");
    ASSERT_NE(at, std::string::npos) << run.result.output;
    const int64_t iteration = std::stoll(run.result.output.substr(at + by.size() + 28));
    EXPECT_EQ(CheckpointStore(ckpt.string()).latest(), iteration) << run.result.output;
    EXPECT_NE(run.result.output.find("saved in " + CheckpointStore(ckpt.string()).path(iteration) +
                                     "; the same command resumes (exit code " + std::to_string(code) + ")"),
              std::string::npos) << run.result.output;
    EXPECT_TRUE(error_lines(run.result.output).empty()) << run.result.output;
  };
  if (missing_backend(kEnvLaunch).empty()) {
    const Timed run = run_timed("timeout 120 " + kEnvLaunch +
                                "2 --kill-rank 1 --once-said 'memory on rank 0' --after 1 --signal TERM -- " +
                                endless(dir / "env", "1"));
    expect_stopped(run, dir / "env", "SIGTERM", 143);
  }
  if (missing_backend(kMpirun).empty()) {
    // Signalled once it trains (its log says so), as under env://: a rank signalled before it
    // handles the signal would just die.
    const std::string log = (dir / "mpi-logs" / "rank-0.log").string();
    const Timed run = run_timed("timeout 120 bash -c '" + kMpirun + "2 " + endless(dir / "mpi", "636363") +
                                " train.log_dir=" + (dir / "mpi-logs").string() +
                                " & job=$!; for i in $(seq 600); do grep -qs \"memory on rank 0\" " + log +
                                " && break; sleep 0.2; done; sleep 1; pkill -TERM -n -f train.seed=636363; wait $job'");
    expect_stopped(run, dir / "mpi", "SIGTERM", 143);
  }
  const Timed run = run_timed("timeout 120 " + endless(dir / "one", "1") + " train.exit_after_minutes=0.05");
  expect_stopped(run, dir / "one", "train.exit_after_minutes", 3);
  const auto resumed = run_command(endless(dir / "one", "1") + " train.exit_after_minutes=0.02");
  EXPECT_EQ(resumed.exit_code, 3) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from "), std::string::npos) << resumed.output;
}

// A stop signal during a long validation (here 10^6 batches) cuts it short before its next
// batch: the run saves and exits within seconds, saying so, with no validation loss for it.
TEST(JobFailure, AStopSignalCutsAValidationShort) {
  const auto dir = scratch_dir();
  const std::string out = (dir / "out").string();
  const std::string command = train_command("", {"data.type=synthetic", "train.iters=1000", "train.eval_interval=1",
                                                 "train.eval_iters=1000000", "data.valid_fraction=0.5",
                                                 "train.checkpoint_dir=" + (dir / "ckpt").string()})
                                  .substr(std::string("timeout 120 ").size());
  // Validation starts after the first step, whose numbers are read then: the memory line.
  const Timed run = run_timed("timeout 120 bash -c '" + command + " > " + out + " 2>&1 & p=$!; until grep -q " +
                              "\"memory on rank 0\" " + out + "; do sleep 0.02; done; sleep 1; kill -TERM $p; wait $p; " +
                              "echo \"exit $?\"; cat " + out + "'");
  EXPECT_LT(run.seconds, 30);
  EXPECT_NE(run.result.output.find("exit 143\n"), std::string::npos) << run.result.output;
  EXPECT_NE(run.result.output.find("warning: validation at iteration 1 cut short by SIGTERM after "), std::string::npos)
      << run.result.output;
  EXPECT_NE(run.result.output.find(" of 1000000 batches: no validation loss for it"), std::string::npos) << run.result.output;
  EXPECT_NE(run.result.output.find("stopped by SIGTERM after iteration 1 of 1000"), std::string::npos) << run.result.output;
  EXPECT_EQ(CheckpointStore((dir / "ckpt").string()).latest(), 1);
}

// A second Ctrl-C makes mpirun return at once; its ranks, mid-iteration, end with it (they get
// SIGTERM when their launcher exits: their second stop signal) instead of running on to save.
// (On this machine Open MPI's own teardown also ends them, within about a second; the bound
// leaves room for a loaded CI machine, and a rank that ran on would save.)
TEST(JobFailure, ASecondCtrlCToMpirunLeavesNoRankRunning) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  const std::string out = (dir / "out").string();
  // About two seconds per iteration on a 2-core machine (0.14 s at hidden 512, which left a
  // loaded CI machine too little time to end the ranks before the iteration's end and its save),
  // so that the ranks are mid-iteration at the second signal and stay so while Open MPI ends them.
  const std::string command = train_command("", {"data.type=synthetic", "train.iters=1000", "model.hidden_size=1024",
                                                 "model.num_layers=6", "model.num_attention_heads=8", "train.seed=717171",
                                                 "train.checkpoint_dir=" + (dir / "ckpt").string()})
                                  .substr(std::string("timeout 120 ").size());
  const std::string ranks = "pgrep -f \"^" + kBin + "/train .*train.seed=717171\"";  // not the shell nor mpirun
  const CommandResult r = run_command(
      "timeout 120 bash -c '" + kMpirun + "2 " + command + " > " + out + " 2>&1 & m=$!; until grep -q \"iter 1/\" " +
      out + "; do sleep 0.02; done; kill -INT $m; sleep 0.1; kill -INT $m; wait $m; for i in $(seq 50); do " + ranks +
      " > /dev/null || break; sleep 0.1; done; echo \"ranks left: $(" + ranks + " | wc -l) after $i\"; sleep 3; ls " +
      (dir / "ckpt").string() + "'");
  EXPECT_NE(r.output.find("ranks left: 0 after "), std::string::npos) << r.output << read_text_file(out, "log");
  const size_t at = r.output.find("ranks left: 0 after ");
  if (at != std::string::npos) EXPECT_LE(std::stoi(r.output.substr(at + 20)), 30) << r.output;
  EXPECT_EQ(r.output.find("iter_"), std::string::npos) << r.output;  // nothing saved after the second Ctrl-C
}

// A second SIGINT while the first waits for the end of an iteration (here: still setting up a
// 124 M-parameter model) ends the process at once, saying so, with nothing saved.
TEST(JobFailure, ASecondStopSignalExitsAtOnceWithoutSaving) {
  const auto dir = scratch_dir();
  const std::string command = train_command("", {"data.type=synthetic", "model.num_layers=12", "model.hidden_size=768",
                                                 "model.num_attention_heads=12", "model.vocab_size=50257",
                                                 "train.checkpoint_dir=" + (dir / "ckpt").string()})
                                  .substr(std::string("timeout 120 ").size());
  const std::string out = (dir / "out").string();
  // The first line is printed once the handlers are installed, before the model is built.
  const auto r = run_command("timeout 120 bash -c '" + command + " > " + out + " 2>&1 & p=$!; until grep -q \"CPU thread\" " +
                             out + "; do sleep 0.02; done; kill -INT $p; sleep 0.2; kill -INT $p; wait $p; echo \"exit $?\"; cat " + out + "'");
  EXPECT_NE(r.output.find("exit 130\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("error: a second stop signal (SIGINT): exiting now, without saving\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stopped by"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "ckpt" / "latest"));
}

// Every rank writes its own log beside the metrics (or in train.log_dir); the error of a rank
// names its log; a log that cannot be opened is one error naming train.log_dir before training.
TEST(RankLogs, EveryRankLogsAndAnErrorNamesItsLog) {
  if (const std::string why = missing_backend(kEnvLaunch); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  const auto r = run_command(train_command(kEnvLaunch + "2 -- ", {"data.type=synthetic", "train.iters=2",
                                                                  "train.metrics_file=" + (dir / "metrics.jsonl").string()}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string rank : {"0", "1"}) {
    const std::string log = read_text_file((dir / "logs" / ("rank-" + rank + ".log")).string(), "log");
    EXPECT_NE(log.find("Z iter 2/2 | samples 32 |"), std::string::npos) << log;
  }
  // The straggler report of each log interval, in the log and in the metrics file.
  EXPECT_NE(r.output.find("[rank 0] ranks over iterations 2-2: computing slowest rank "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" s; waiting in communication min "), std::string::npos) << r.output;
  const std::string metrics = read_text_file((dir / "metrics.jsonl").string(), "metrics");
  for (const char* key : {"\"straggler/slowest_rank\": ", "\"straggler/slowest_compute_s\": ", "\"straggler/wait_max_s\": "})
    EXPECT_NE(metrics.find(key), std::string::npos) << key << " not in\n" << metrics;
  const Timed killed = run_timed("timeout 120 " + kEnvLaunch +
                                 "2 --kill-rank 1 --once-said 'memory on rank 0' --after 1 -- " +
                                 train_command("", {"data.type=synthetic", "train.iters=1000000",
                                                    "train.log_dir=" + (dir / "killed").string()})
                                     .substr(std::string("timeout 120 ").size()));
  expect_ended_in_failure(killed, 60);
  EXPECT_NE(killed.result.output.find("[rank 0]   (rank 0's log: " + (dir / "killed/rank-0.log").string() + ")"),
            std::string::npos) << killed.result.output;
  EXPECT_NE(read_text_file((dir / "killed/rank-0.log").string(), "log").find("Z error: gloo "), std::string::npos);

  write_text_file((dir / "a-file").string(), "");
  const auto bad = run_command(train_command("", {"data.type=synthetic", "train.log_dir=" + (dir / "a-file").string()}));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(bad.output.rfind("error: train.log_dir: cannot open the rank log '" + (dir / "a-file/rank-0.log").string() +
                             "': Not a directory\n", 0), 0u) << bad.output;
  // The folder beside train.metrics_file: the key the user set is the one named.
  const auto beside = run_command(
      train_command("", {"data.type=synthetic", "train.metrics_file=" + (dir / "a-file/m.jsonl").string()}));
  EXPECT_EQ(beside.output.rfind("error: train.metrics_file (its logs/ folder): cannot open the rank log '", 0), 0u)
      << beside.output;
}
