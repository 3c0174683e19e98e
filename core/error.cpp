#include "core/error.h"

namespace trident {
namespace {

std::string prefix(const std::vector<int>& ranks, int world_size) {
  if (int(ranks.size()) == world_size) return "error: ";
  std::string out = ranks.size() == 1 ? "error (rank " : "error (ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "): ";
}

// what(): the report without its "error" words, so that a library caller reads it as is.
std::string summary(const std::vector<JobError::Failure>& failures, int world_size) {
  std::string out;
  for (const auto& f : failures) {
    if (!out.empty()) out += "; ";
    if (int(f.ranks.size()) != world_size) {
      const std::string p = prefix(f.ranks, world_size);  // "error (rank 1): "
      out += p.substr(7, p.size() - 10) + ": ";             // "rank 1: "
    }
    out += f.message;
  }
  return out;
}

}  // namespace

JobError::JobError(std::vector<Failure> failures, int world_size)
    : Error(summary(failures, world_size)), failures_(std::move(failures)), world_size_(world_size) {}

JobError JobError::everywhere(const std::string& message, int world_size) {
  std::vector<int> ranks;
  for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  return JobError({{ranks, message}}, world_size);
}

void detail::check_failed(const char* condition, const char* file, int line, const std::string& message) {
  throw InternalError(str("internal error at ", file, ":", line, ": ", message, " (`", condition, "` is false)"));
}

std::string JobError::report() const {
  std::string out;
  for (const auto& f : failures_) out += prefix(f.ranks, world_size_) + f.message + "\n";
  return out;
}

}  // namespace trident
