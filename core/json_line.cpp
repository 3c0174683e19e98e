#include "core/json_line.h"

#include <cmath>
#include <cstdio>

namespace trident {
namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", c);
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

void JsonLine::key(const std::string& name) {
  if (!body_.empty()) body_ += ", ";
  body_ += quoted(name) + ": ";
}

JsonLine& JsonLine::add(const std::string& name, double value) {
  key(name);
  if (!std::isfinite(value)) {
    body_ += "null";  // JSON has no NaN or infinity
  } else {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.9g", value);
    body_ += buffer;
  }
  return *this;
}

JsonLine& JsonLine::add(const std::string& name, int64_t value) {
  key(name);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::add(const std::string& name, const std::string& value) {
  key(name);
  body_ += quoted(value);
  return *this;
}

}  // namespace trident
