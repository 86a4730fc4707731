// Split-independent fingerprints of tensor values (value_fingerprint.h).
#include "core/value_fingerprint.h"

#include <cstdio>
#include <cstring>

#include "core/counter_rng.h"

namespace cadre {
namespace {

// splitmix64's finaliser: every input bit moves every output bit, so the sum of element
// hashes changes when any element's value or place does.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t element(uint64_t key, int64_t index, uint16_t bf16) {
  return mix(key + ((static_cast<uint64_t>(index) << 16) | bf16));
}

// Round to nearest even, as a float32 -> bfloat16 conversion does (values here are weights:
// NaN payloads need no care).
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace

uint64_t value_fingerprint_key(std::string_view tensor_name) { return counter_rng::stream_key(0, tensor_name); }

uint64_t value_fingerprint(uint64_t key, int64_t first, const float* values, int64_t count) {
  uint64_t sum = 0;
  for (int64_t j = 0; j < count; ++j) sum += element(key, first + j, to_bf16(values[j]));
  return sum;
}

uint64_t value_fingerprint_bf16(uint64_t key, int64_t first, const uint16_t* values, int64_t count) {
  uint64_t sum = 0;
  for (int64_t j = 0; j < count; ++j) sum += element(key, first + j, values[j]);
  return sum;
}

std::string value_fingerprint_text(uint64_t fingerprint) {
  char buffer[19];
  std::snprintf(buffer, sizeof buffer, "0x%016llx", static_cast<unsigned long long>(fingerprint));
  return buffer;
}

}  // namespace cadre
