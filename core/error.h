// The exception types trident throws for failures it diagnoses (bad config, data, checkpoint or
// launch; a lost peer; divergence). Their messages are complete on their own: the program
// prints them once and exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace trident {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error every rank of the job raised together, knowing what failed where: after the ranks
// exchanged their outcomes (parallel/comm/failure.h's agree), or for a condition every rank sees
// identically (a non-finite loss). Each distinct message comes with the ranks that had it;
// rank 0 reports it, once.
class JobError : public Error {
 public:
  struct Failure {
    std::vector<int> ranks;  // ascending
    std::string message;
  };
  JobError(std::vector<Failure> failures, int world_size);
  // The same message on every rank of a job of `world_size`.
  static JobError everywhere(const std::string& message, int world_size);

  const std::vector<Failure>& failures() const { return failures_; }
  // One line per failure: "error: m" when every rank had m, else "error (rank 1): m" or
  // "error (ranks 0, 2): m".
  std::string report() const;

 private:
  std::vector<Failure> failures_;
  int world_size_;
};

// A broken invariant: a mistake in trident's own code, not in its input (see TRIDENT_CHECK).
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Concatenates anything streamable: str("layer ", i, " of ", n).
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Bad input: throws Error with the concatenated message (one line naming the key, option or
// file and what was expected).
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(trident::str(parts...));
}

namespace detail {
[[noreturn]] void check_failed(const char* condition, const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace trident

// Checks an invariant of trident's own code, unlike fail(), which reports bad input: throws
// InternalError "internal error at parallel/pipeline.cpp:123: <message> (`<condition>` is false)".
#define TRIDENT_CHECK(condition, ...)                                                               \
  do {                                                                                             \
    if (!(condition))                                                                              \
      ::trident::detail::check_failed(#condition, __FILE__, __LINE__, ::trident::str(__VA_ARGS__)); \
  } while (false)
