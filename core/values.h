// Values typed by users (config keys, command-line options): strict text -> value parsing and
// the rules a value must meet, with the words an error message uses ("a positive integer").
// The config schema and every program's command line share them, so a rule reads the same
// wherever it is checked.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trident {

// The whole text must be the value: "12x", "" and "nan" are rejected. Booleans take
// true/false, True/False, yes/no, on/off.
bool parse_value(const std::string& text, int64_t& out);
bool parse_value(const std::string& text, uint64_t& out);
bool parse_value(const std::string& text, double& out);
bool parse_value(const std::string& text, bool& out);
bool parse_value(const std::string& text, std::string& out);

// What a value must be, with the words used in the error.
template <typename T>
struct Rule {
  std::string expected;  // "a positive integer"
  std::function<bool(const T&)> accepts = [](const T&) { return true; };
};

Rule<int64_t> at_least(int64_t low);
Rule<int64_t> between(int64_t low, int64_t high);
Rule<double> positive_number();
Rule<double> non_negative_number();
Rule<double> fraction_below_one();   // [0, 1)
Rule<std::string> one_of(std::vector<std::string> allowed);
template <typename T>
Rule<T> any(std::string expected) {
  return {std::move(expected)};
}

// "" when `text` parses and meets `rule`, else "expected <rule>, got '<text>'".
template <typename T>
std::string check_value(const std::string& text, const Rule<T>& rule, T& out) {
  if (parse_value(text, out) && rule.accepts(out)) return "";
  return "expected " + rule.expected + ", got '" + text + "'";
}

}  // namespace trident
