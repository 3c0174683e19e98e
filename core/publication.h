// Outputs that replace the older ones together or not at all: a dataset's .bin, .idx and
// tokenizer files (preprocess), an export's folder. Each is written beside the file it replaces,
// as <path>.partial, and published in one step once all are complete:
//
//   Publication files(prefix + ".publishing");
//   FileWriter bin(files.stage(prefix + ".bin"));  ...  bin.finish();
//   files.publish();
//
//   publish():  old files hard-linked to <path>.previous ─▶ journal (<name>.publishing) written
//               ─▶ each .partial renamed over its path ─▶ journal and .previous files removed
//
// Unpublished when destroyed (an error, a signal), it removes its .partial files and the older
// outputs are untouched. A failure while publishing puts the .previous files back. SIGINT,
// SIGTERM and SIGHUP are held back while it publishes (in its thread; a handler elsewhere asks
// publishing_now()); a process killed there (SIGKILL, a crash) leaves the journal (absolute
// paths), and the next Publication of the same journal (or roll_back_interrupted()) puts the
// older files back before anything is staged.
#pragma once

#include <string>
#include <vector>

namespace trident {

class Publication {
 public:
  explicit Publication(std::string journal);
  ~Publication();
  Publication(const Publication&) = delete;
  Publication& operator=(const Publication&) = delete;

  // Where to write the new `path`: `path`.partial, removed unless published.
  std::string stage(const std::string& path);
  // Every staged file is complete: replaces the older ones with them, together.
  void publish();

  // For a signal handler (a second Ctrl-C that ends the process at once): removes the .partial
  // files of every unpublished publication. Async-signal-safe. Not while publishing_now(): the
  // held signals are held in the publishing thread only, and another thread may take one then.
  static void remove_staged_files_in_signal_handler() noexcept;
  static bool publishing_now() noexcept;
  // When `journal` exists, a publication was killed while publishing: puts the files it replaced
  // back, removes the ones it added, and returns true.
  static bool roll_back_interrupted(const std::string& journal);

 private:
  std::string journal_;
  std::vector<std::string> paths_;  // the files staged, by final path
  std::vector<int> slots_;          // their places in the signal handler's list
  bool published_ = false;
};

}  // namespace trident
