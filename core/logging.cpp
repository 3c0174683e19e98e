#include "core/logging.h"

#include <cstdio>

namespace trident::log {
namespace {
bool is_primary = true;
}

void set_primary(bool primary) { is_primary = primary; }
bool primary() { return is_primary; }

void info(const std::string& line) {
  if (!is_primary) return;
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void warn(const std::string& line) {
  if (!is_primary) return;
  std::fprintf(stderr, "warning: %s\n", line.c_str());
}

}  // namespace trident::log
