// What the batch-invariant kernels share (batch_invariant_linear.cpp, bf16_dot_tiles.cpp): a dot
// product lives in 16 float lanes and ends in one fixed reduction tree, the same on every path.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// GCC 12 reports the deliberately undefined upper halves inside its own AVX-512 cast and
// extract intrinsics as uninitialised (a known false positive of the intrinsics headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define CADRE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace cadre::lanes {

constexpr int kLanes = 16;
constexpr int kTile = 4;  // rows of x and of W per register tile

using bf16_bits = uint16_t;

inline float widen(float w) { return w; }
inline float widen(bf16_bits w) {
  uint32_t u = static_cast<uint32_t>(w) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The fixed reduction tree: lanes i and i+8, then i+4, then i+2, then 0 and 1.
inline float reduce_lanes(const float* v) {
  float a[8], b[4];
  for (int i = 0; i < 8; ++i) a[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
  const float c0 = b[0] + b[2], c1 = b[1] + b[3];
  return c0 + c1;
}

CADRE_AVX512 inline float reduce_avx512(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 a = _mm256_add_ps(lo, hi);                                             // i + (i+8)
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));  // i + (i+4)
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                // 0+2, 1+3
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));                      // 0 + 1
}

}  // namespace cadre::lanes
