#include "core/checksum.h"

#include <cstdio>

#define XXH_INLINE_ALL  // the whole library in this file: nothing to link
#include <xxhash.h>

namespace trident {

struct Checksum::State {
  XXH3_state_t xxh3;
};

Checksum::Checksum() : state_(std::make_unique<State>()) { XXH3_64bits_reset(&state_->xxh3); }
Checksum::~Checksum() = default;

void Checksum::update(const void* data, size_t size) { XXH3_64bits_update(&state_->xxh3, data, size); }

uint64_t Checksum::value() const { return XXH3_64bits_digest(&state_->xxh3); }

std::string Checksum::hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace trident
