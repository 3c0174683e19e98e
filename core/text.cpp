#include "core/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace trident {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(separator, start), text.size());
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string si_units(double value, int precision) {
  static const char* prefixes[] = {"", " K", " M", " G", " T", " P", " E"};
  int index = 0;
  while (std::fabs(value) >= 1000.0 && index < 6) {
    value /= 1000.0;
    ++index;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*g%s", precision, value, prefixes[index]);
  return buffer;
}

std::string binary_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int index = 0;
  while (std::fabs(bytes) >= 1024.0 && index < 5) {
    bytes /= 1024.0;
    ++index;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.3g %s", bytes, units[index]);
  return buffer;
}

}  // namespace trident
