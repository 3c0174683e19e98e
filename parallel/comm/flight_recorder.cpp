#include "parallel/comm/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "parallel/comm/network_route.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

// The world ranks in a group key "data-parallel[0,2]".
std::vector<int> members_of(const std::string& group) {
  std::vector<int> ranks;
  const size_t open = group.rfind('[');
  if (open == std::string::npos) return ranks;
  for (const auto& part : split(group.substr(open + 1, group.size() - open - 2), ','))
    if (!part.empty()) ranks.push_back(std::stoi(part));
  return ranks;
}

struct LastOperation {
  int64_t sequence = -1;
  std::string operation, state, address;
};

// The `last` line of `group` in a rank's record (sequence -1 when it has none), and its address.
LastOperation last_in_record(const std::string& file, const std::string& group) {
  std::ifstream in(file);
  LastOperation last;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string kind, key;
    words >> kind >> key;
    if (kind == "address") last.address = key;
    if (kind == "last" && key == group) words >> last.sequence >> last.operation >> last.state;
  }
  return last;
}

// The addresses of `records` that do not answer from this host ("" is never probed). Each host
// is probed once, all at the same time: a probe of a lost host waits the whole second.
std::set<std::string> hosts_not_answering(const std::map<int, LastOperation>& records) {
  std::set<std::string> hosts;
  for (const auto& [member, last] : records) hosts.insert(last.address);
  std::vector<std::pair<std::string, std::future<bool>>> probes;
  for (const auto& host : hosts)
    if (!host.empty()) try {
        probes.emplace_back(host, std::async(std::launch::async, host_answers, host, std::chrono::milliseconds(1000)));
      } catch (const std::system_error&) {  // no thread to probe with: say nothing of that host
      }
  std::set<std::string> silent;
  for (auto& [host, answers] : probes)
    if (!answers.get()) silent.insert(host);
  return silent;
}

}  // namespace

FlightRecorder& FlightRecorder::process() {
  static FlightRecorder* recorder = new FlightRecorder;
  return *recorder;
}

std::string FlightRecorder::job_file(const std::string& kind, const std::string& name) const {
  return (fs::path(folder_) / str(kind, "-", job_.empty() ? "" : job_ + "-", name, ".txt")).string();
}

std::string FlightRecorder::record_file(int rank) const { return job_file("flight", str("rank-", rank)); }

void FlightRecorder::keep_records_in(std::string folder, std::string job, int world_rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  folder_ = std::move(folder);
  job_ = std::move(job);
  rank_ = world_rank;
  if (folder_.empty()) return;
  std::remove(record_file(rank_).c_str());  // a previous run's
  if (rank_ == 0) std::remove(job_file("error", "first").c_str());
}

void FlightRecorder::set_address(std::string address) {
  std::lock_guard<std::mutex> lock(mutex_);
  address_ = std::move(address);
}

int64_t FlightRecorder::started(const std::string& group, int64_t sequence, const char* operation, int64_t bytes) {
  const double now = epoch_.elapsed_s();
  std::lock_guard<std::mutex> lock(mutex_);
  Entry entry{next_id_++, sequence, bytes, operation, group, now, -1};
  last_[group] = entry;
  entries_.push_back(std::move(entry));
  if (entries_.size() > kKept) entries_.pop_front();
  return entries_.back().id;
}

void FlightRecorder::finished(int64_t id, double blocked_s) {
  const double now = epoch_.elapsed_s();
  std::lock_guard<std::mutex> lock(mutex_);
  blocked_s_ += blocked_s;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->id == id) {
      it->end_s = now;
      auto last = last_.find(it->group);
      if (last != last_.end() && last->second.id == id) last->second.end_s = now;
      return;
    }
}

double FlightRecorder::blocked_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocked_s_;
}

std::string FlightRecorder::write_record() const {
  std::ostringstream out;
  if (!address_.empty()) out << "address " << address_ << "\n";
  for (const auto& [group, e] : last_)
    out << "last " << group << " " << e.sequence << " " << e.operation << " " << (e.end_s < 0 ? "in-flight" : "finished")
        << "\n";
  for (const auto& e : entries_)
    out << "entry " << e.sequence << " " << e.operation << " " << e.group << " " << e.bytes << " " << fixed(e.start_s, 6)
        << " " << (e.end_s < 0 ? std::string("-") : fixed(e.end_s, 6)) << "\n";
  const std::string file = record_file(rank_), partial = file + ".partial";
  std::ofstream(partial) << out.str();
  fs::rename(partial, file);  // whole, for the ranks reading it
  return file;
}

namespace {
// A cause with its numbers blanked: "peer [127.0.0.1]:41168" and "peer [127.0.0.1]:52210" match.
std::string without_numbers(const std::string& text) {
  std::string out;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c)) || out.empty() || out.back() != '#')
      out += std::isdigit(static_cast<unsigned char>(c)) ? '#' : c;
  return out;
}
}  // namespace

bool FlightRecorder::first_to_report(const std::string& cause) {
  std::string file;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (folder_.empty()) return true;
    file = job_file("error", "first");
  }
  const int fd = ::open(file.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd >= 0) {
    const std::string line = str(rank_, " ", cause);
    // One write: a reader sees all of it or nothing (and then speaks for itself).
    const ssize_t written = ::write(fd, line.data(), line.size());
    (void)written;
    ::close(fd);
    return true;
  }
  // Another rank claimed it; it writes its cause at once after creating the file.
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::ifstream in(file);
    std::string rank, first;
    if (in >> rank && std::getline(in, first) && !first.empty())
      return without_numbers(first.substr(1)) != without_numbers(cause);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::string FlightRecorder::explain_failure(std::chrono::seconds wait, int64_t id) {
  std::string folder, group, file;
  int64_t sequence = -1;
  std::string operation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (folder_.empty()) return "";
    try {
      file = write_record();
    } catch (const std::exception&) {
      return "";
    }
    for (const auto& e : entries_)
      if (id >= 0 ? e.id == id : e.end_s < 0) {
        group = e.group, sequence = e.sequence, operation = e.operation;
        break;
      }
    folder = folder_;
  }
  if (sequence < 0) return str("flight record in ", file);
  // The others write theirs when their own wait times out; give them a few seconds.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (int member : members_of(group))
      if (member != rank_ && !fs::exists(record_file(member))) missing.push_back(member);
    if (missing.empty() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::map<int, LastOperation> records;
  for (int member : members_of(group))
    if (member != rank_ && std::find(missing.begin(), missing.end(), member) == missing.end())
      records[member] = last_in_record(record_file(member), group);
  const std::set<std::string> silent_hosts = hosts_not_answering(records);
  // A peer that does not answer from here is cut off (a lost link or host), whether it reached
  // this operation or is behind: after a cut, a peer still waiting in an earlier operation of the
  // group (its last bytes lost) looks behind, and the cut is the cause.
  std::vector<std::string> behind, unreachable;
  for (const auto& [member, last] : records) {
    const std::string position =
        last.sequence < 0 ? "no operation on this group yet"
                          : str("at #", last.sequence, " ", last.operation, ", ", last.state);
    if (silent_hosts.count(last.address))
      unreachable.push_back(last.sequence < sequence ? str("rank ", member, " (", last.address, ", ", position, ")")
                                                     : str("rank ", member, " (", last.address, ")"));
    else if (last.sequence < sequence)
      behind.push_back(str("rank ", member, " (", position, ")"));
  }
  std::vector<std::string> silent;
  for (int m : missing) silent.push_back(str(m));
  std::string verdict;
  if (!unreachable.empty()) verdict = str("unreachable from this rank: ", join(unreachable, ", "));
  if (!behind.empty()) verdict += str(verdict.empty() ? "" : "; ", "behind: ", join(behind, ", "));
  if (!silent.empty())
    verdict += str(verdict.empty() ? "" : "; ", "rank", silent.size() > 1 ? "s " : " ", join(silent, ", "),
                   " left no flight record within ", wait.count(), " s: stopped, stuck outside communication, or cut off");
  if (verdict.empty()) verdict = str("every rank of the group reached #", sequence, ": the transfer itself failed (a lost link or host?)");
  return str("this rank was in #", sequence, " ", operation, " on ", group, "; ", verdict, " (flight records in ", folder, ")");
}

}  // namespace trident
