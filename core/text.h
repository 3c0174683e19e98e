// Small string helpers shared by config parsing and error messages.
#pragma once

#include <string>
#include <vector>

namespace trident {

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word`, or "" when none is plausibly a typo of it.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, const std::string& separator);

// The non-empty pieces of `text` between `separator`s: "a,,b" -> {"a", "b"}.
std::vector<std::string> split(const std::string& text, char separator);

// Human-readable quantities: 1.23e9 -> "1.23 G".
std::string si_units(double value, int precision = 3);
// Bytes in binary units: 3.37e6 -> "3.21 MiB".
std::string binary_bytes(double bytes);
// `digits` after the point: fixed(3.14159, 2) -> "3.14".
std::string fixed(double value, int digits);

}  // namespace trident
