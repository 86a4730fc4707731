// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011). Element i of a stream is a function of (key, i) alone, so any rank can
// compute any slice of a tensor's initial values without generating what comes before it: a
// model initialised in shards on any number of ranks is bit-identical to one initialised whole.
// Keys come from (seed, a name), so each parameter has a stream of its own.
#pragma once

#include <cstdint>
#include <string_view>

namespace cadre::counter_rng {

// The key of the stream named `name` under `seed` (FNV-1a of the name, mixed with the seed).
uint64_t stream_key(uint64_t seed, std::string_view name);

// The key of sub-stream `index` of stream `key` (a stream per step, per sample, ...).
uint64_t substream(uint64_t key, uint64_t index);

// Four 32-bit words for counter `index` of stream `key`.
struct Block {
  uint32_t x[4];
};
Block philox(uint64_t key, uint64_t index);

// out[j] = mean + std * N(0, 1) for element start + j of the stream, j < count: a Box-Muller
// normal from the element's own block (53-bit uniforms, computed in double, rounded once).
void normal(uint64_t key, uint64_t start, int64_t count, double mean, double std, float* out);

// out[j] = U[low, high) for element start + j of the stream (a 53-bit uniform from the element's
// own block, computed in double, rounded once).
void uniform(uint64_t key, uint64_t start, int64_t count, double low, double high, float* out);

}  // namespace cadre::counter_rng
