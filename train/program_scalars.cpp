#include "train/program_scalars.h"

#include <cstring>
#include <set>

namespace trident {
namespace {

// A rank's scalars as bytes: for each, the name's length (int64), the name, the value (double).
std::string encode(const std::vector<std::pair<std::string, double>>& scalars) {
  std::string out;
  for (const auto& [name, value] : scalars) {
    const int64_t length = int64_t(name.size());
    out.append(reinterpret_cast<const char*>(&length), sizeof length);
    out += name;
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  return out;
}

void decode(const char* bytes, int64_t size, std::vector<std::pair<std::string, double>>& into,
            std::set<std::string>& seen) {
  int64_t at = 0;
  while (at < size) {
    int64_t length = 0;
    double value = 0;
    std::memcpy(&length, bytes + at, sizeof length);
    const std::string name(bytes + at + sizeof length, size_t(length));
    std::memcpy(&value, bytes + at + int64_t(sizeof length) + length, sizeof value);
    at += int64_t(sizeof length) + length + int64_t(sizeof value);
    if (seen.insert(name).second) into.emplace_back(name, value);
  }
}

}  // namespace

void gather_program_scalars(Communicator& world, IterationMetrics& m) {
  const std::string mine = encode(m.scalars);
  torch::Tensor sizes = torch::empty({world.size()}, torch::kLong);
  world.all_gather(sizes, torch::tensor({int64_t(mine.size())}, torch::kLong));
  const int64_t widest = sizes.max().item<int64_t>();
  if (widest == 0) return;
  torch::Tensor padded = torch::zeros({widest}, torch::kUInt8);
  std::memcpy(padded.data_ptr<uint8_t>(), mine.data(), mine.size());
  torch::Tensor all = torch::empty({world.size() * widest}, torch::kUInt8);
  world.all_gather(all, padded);
  std::vector<std::pair<std::string, double>> merged;
  std::set<std::string> seen;
  for (int rank = 0; rank < world.size(); ++rank)
    decode(reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + rank * widest, sizes[rank].item<int64_t>(), merged,
           seen);
  m.scalars = std::move(merged);
}

}  // namespace trident
