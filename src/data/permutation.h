// Deterministic permutations from a seed, identical on every platform and library (std::shuffle
// is not specified across standard libraries, and resume across machines needs the same order).
#pragma once

#include <cstdint>
#include <vector>

namespace cadre {

// SplitMix64: a small, well-mixed 64-bit generator.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Fisher-Yates permutation of [0, n) seeded by (seed, stream).
inline std::vector<uint64_t> permutation(uint64_t n, uint64_t seed, uint64_t stream) {
  std::vector<uint64_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + stream;
  for (uint64_t i = n; i > 1; --i) {
    // Multiply-shift maps 64 random bits onto [0, i) without modulo bias worth noting at these sizes.
    uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(state)) * i) >> 64);
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

}  // namespace cadre
