// Philox4x32-10 and the normal distribution drawn from it (see counter_rng.h).
#include "core/counter_rng.h"

#include <cmath>

namespace cadre::counter_rng {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // the round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // the key schedule's increments

inline void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// A uniform double in [0, 1) from 53 bits of two words.
inline double uniform53(uint32_t a, uint32_t b) {
  return (double(a >> 5) * 67108864.0 + double(b >> 6)) * (1.0 / 9007199254740992.0);
}

// splitmix64's finaliser: spreads the seed's bits before it meets the name's hash.
inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t stream_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return mix(seed + 0x9E3779B97F4A7C15ull) ^ h;
}

uint64_t substream(uint64_t key, uint64_t index) { return mix(key ^ mix(index + 0x9E3779B97F4A7C15ull)); }

Block philox(uint64_t key, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kMul0, c0, hi0, lo0);
    mul_hi_lo(kMul1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

void normal(uint64_t key, uint64_t start, int64_t count, double mean, double std, float* out) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int64_t j = 0; j < count; ++j) {
    const Block b = philox(key, start + uint64_t(j));
    const double u1 = 1.0 - uniform53(b.x[0], b.x[1]);  // (0, 1]: log is finite
    const double u2 = uniform53(b.x[2], b.x[3]);
    out[j] = float(mean + std * (std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2)));
  }
}

void uniform(uint64_t key, uint64_t start, int64_t count, double low, double high, float* out) {
  for (int64_t j = 0; j < count; ++j) {
    const Block b = philox(key, start + uint64_t(j));
    out[j] = float(low + (high - low) * uniform53(b.x[0], b.x[1]));
  }
}

}  // namespace cadre::counter_rng
