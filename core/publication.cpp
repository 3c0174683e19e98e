#include "core/publication.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/fault_injection.h"
#include "core/files.h"

namespace fs = std::filesystem;

namespace trident {
namespace {

// The .partial files of unpublished publications, as fixed C strings a signal handler can read.
// A slot is taken (`slot_used`), filled, then listed (`slot_listed`, which the handler reads).
constexpr size_t kSlots = 32;
constexpr size_t kPathBytes = 4096;
std::array<std::array<char, kPathBytes>, kSlots> staged_paths;
std::array<std::atomic<bool>, kSlots> slot_used{};
std::array<std::atomic<bool>, kSlots> slot_listed{};
std::atomic<bool> publishing{false};

int take_slot(const std::string& partial) {
  if (partial.size() >= kPathBytes) return -1;  // too long to list: removed by the destructor only
  for (size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (slot_used[i].load() || !slot_used[i].compare_exchange_strong(expected, true)) continue;
    std::memcpy(staged_paths[i].data(), partial.c_str(), partial.size() + 1);
    slot_listed[i].store(true, std::memory_order_release);
    return int(i);
  }
  return -1;
}

std::string partial_of(const std::string& path) { return path + ".partial"; }
std::string previous_of(const std::string& path) { return path + ".previous"; }
std::string folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// Holds back the signals that stop a run politely while files are renamed.
class HeldSignals {
 public:
  HeldSignals() {
    sigset_t held;
    sigemptyset(&held);
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held, signal);
    pthread_sigmask(SIG_BLOCK, &held, &before_);
  }
  ~HeldSignals() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }

 private:
  sigset_t before_;
};

// Puts back what the journal's lines say: "replaces <path>" (its .previous returns) or "new
// <path>" (removed), then removes the journal. Best effort per file; the first failure is thrown.
void roll_back(const std::string& journal) {
  std::istringstream lines(read_text_file(journal, "publication journal"));
  std::string kind, path, failure;
  while (lines >> kind && std::getline(lines >> std::ws, path)) {
    std::remove(partial_of(path).c_str());
    if (kind == "replaces" && fs::exists(previous_of(path))) {
      if (std::rename(previous_of(path).c_str(), path.c_str()) != 0 && failure.empty())
        failure = str("cannot put '", path, "' back from '", previous_of(path), "': ", std::strerror(errno));
      std::remove(previous_of(path).c_str());  // a rename between two links of one file leaves both
    } else if (kind == "new") {
      std::remove(path.c_str());
    }
  }
  if (!failure.empty()) fail(failure, " (", journal, " lists the files being published)");
  std::remove(journal.c_str());
}

}  // namespace

Publication::Publication(std::string journal) : journal_(std::move(journal)) {
  roll_back_interrupted(journal_);  // an earlier publication killed half-way: its older files first
}

Publication::~Publication() {
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (!published_) std::remove(partial_of(paths_[i]).c_str());
    if (slots_[i] >= 0) slot_listed[size_t(slots_[i])] = false, slot_used[size_t(slots_[i])] = false;
  }
}

std::string Publication::stage(const std::string& path) {
  TRIDENT_CHECK(!published_, "Publication::stage after publish");
  paths_.push_back(fs::absolute(path).string());  // the journal must name them wherever it is read from
  slots_.push_back(take_slot(partial_of(paths_.back())));
  return partial_of(path);
}

void Publication::publish() {
  const HeldSignals held;
  publishing = true;
  struct Done {
    ~Done() { publishing = false; }
  } done;
  std::string journal;
  std::vector<std::string> kept;  // the .previous links made
  try {
    for (const std::string& path : paths_) {
      const std::string previous = previous_of(path);
      std::remove(previous.c_str());  // left by a run killed before its journal
      const bool replaces = fs::exists(path);
      const int failed = !replaces ? 0 : fault_point() ? EIO : ::link(path.c_str(), previous.c_str()) != 0 ? errno : 0;
      if (failed != 0) fail("cannot keep '", path, "' as '", previous, "' while publishing: ", std::strerror(failed));
      if (replaces) kept.push_back(previous);
      journal += str(replaces ? "replaces " : "new ", path, "\n");
    }
    replace_file(journal_, journal);
  } catch (...) {  // nothing is replaced yet
    for (const std::string& previous : kept) std::remove(previous.c_str());
    throw;
  }
  try {
    sync_path(folder_of(journal_));
    for (const std::string& path : paths_) rename_path(partial_of(path), path);
    sync_path(folder_of(journal_));
  } catch (...) {
    try {
      roll_back(journal_);
    } catch (const std::exception&) {  // the rename's error is the one to report; the journal stays
    }
    throw;
  }
  published_ = true;
  std::remove(journal_.c_str());
  for (const std::string& path : paths_) std::remove(previous_of(path).c_str());
}

bool Publication::publishing_now() noexcept { return publishing.load(); }

void Publication::remove_staged_files_in_signal_handler() noexcept {
  for (size_t i = 0; i < kSlots; ++i)
    if (slot_listed[i].load(std::memory_order_acquire)) ::unlink(staged_paths[i].data());
}

bool Publication::roll_back_interrupted(const std::string& journal) {
  if (!fs::exists(journal)) return false;
  roll_back(journal);
  return true;
}

}  // namespace trident
