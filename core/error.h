// The one exception type trident throws for bad input (config, data, checkpoint, launch).
// Its message is complete on its own: the program prints it once and exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace trident {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates anything streamable: str("layer ", i, " of ", n).
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(trident::str(parts...));
}

}  // namespace trident
