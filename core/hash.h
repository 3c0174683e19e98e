// SplitMix64 (Steele, Lea and Flood 2014): a stateless, portable 64-bit mix, so that shuffles,
// synthetic tokens and random-stream seeds are the same on every platform and standard library.
#pragma once

#include <cstdint>

namespace trident {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace trident
