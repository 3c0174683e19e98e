// One flat JSON object on one line, for metrics files (JSON Lines).
#pragma once

#include <cstdint>
#include <string>

namespace trident {

class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, const std::string& value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& name);
  std::string body_;
};

}  // namespace trident
