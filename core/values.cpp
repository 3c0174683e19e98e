#include "core/values.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/text.h"

namespace trident {
namespace {

template <typename Integer>
bool parse_integer(const std::string& text, Integer& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

bool parse_value(const std::string& text, int64_t& out) { return parse_integer(text, out); }
bool parse_value(const std::string& text, uint64_t& out) { return parse_integer(text, out); }

bool parse_value(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(out);
}

bool parse_value(const std::string& text, bool& out) {
  if (text == "true" || text == "True" || text == "yes" || text == "on") return out = true, true;
  if (text == "false" || text == "False" || text == "no" || text == "off") return out = false, true;
  return false;
}

bool parse_value(const std::string& text, std::string& out) {
  out = text;
  return true;
}

Rule<int64_t> at_least(int64_t low) {
  if (low == 1) return {"a positive integer", [](const int64_t& v) { return v >= 1; }};
  return {str("an integer >= ", low), [low](const int64_t& v) { return v >= low; }};
}

Rule<int64_t> between(int64_t low, int64_t high) {
  return {str("an integer from ", low, " to ", high),
          [=](const int64_t& v) { return v >= low && v <= high; }};
}

Rule<double> positive_number() {
  return {"a number > 0", [](const double& v) { return v > 0; }};
}

Rule<double> non_negative_number() {
  return {"a number >= 0", [](const double& v) { return v >= 0; }};
}

Rule<double> fraction_below_one() {
  return {"a number in [0, 1)", [](const double& v) { return v >= 0 && v < 1; }};
}

Rule<std::string> one_of(std::vector<std::string> allowed) {
  return {"one of " + join(allowed, ", "), [allowed](const std::string& v) {
            for (const auto& a : allowed)
              if (a == v) return true;
            return false;
          }};
}

}  // namespace trident
