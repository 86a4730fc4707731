// Arithmetic for the fused CPU kernels in this folder, written so the compiler vectorises it:
// float32 views of an element, sums in lanes, exp, and the per-ISA clones the hot loops are
// compiled as. Libtorch's own vector types live behind ATen's per-ISA dispatch, not in its headers.
#pragma once

#include <cstdint>
#include <cstring>

#include <c10/util/BFloat16.h>

// A hot loop compiled three times, for AVX-512, AVX2 and the baseline, the best picked when the
// program loads (GNU ifunc). The files that use it compile with -ffp-contract=off (no FMA
// contraction), so the three round alike: a result does not depend on the machine's ISA.
#define CADRE_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace cadre {

inline float f32(float v) { return v; }

// bfloat16's bits are float32's top half: a shift, which GCC vectorises.
inline float f32(c10::BFloat16 v) {
  const uint32_t bits = uint32_t(v.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 to T, rounded to nearest even. For bfloat16 without c10's branch on NaN (a select
// instead), which kept the loops around it from vectorising.
template <typename T>
inline T from_f32(float v);

template <>
inline float from_f32<float>(float v) {
  return v;
}

// v's float32 bits rounded to bfloat16's (nearest even; the low 16 bits zero), NaN kept a NaN.
inline uint32_t bfloat16_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return v != v ? 0x7FC00000u : (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
}

template <>
inline c10::BFloat16 from_f32<c10::BFloat16>(float v) {
  return c10::BFloat16(static_cast<uint16_t>(bfloat16_bits(v) >> 16), c10::BFloat16::from_bits());
}

// v rounded to T's precision and kept in float32 (for float32, v). For bfloat16 in 32-bit
// integers throughout, so a loop of float32 arithmetic stays one of 32-bit elements (see widen).
template <typename T>
inline float round_as(float v);

template <>
inline float round_as<float>(float v) {
  return v;
}

template <>
inline float round_as<c10::BFloat16>(float v) {
  const uint32_t rounded = bfloat16_bits(v);
  float r;
  std::memcpy(&r, &rounded, sizeof r);
  return r;
}

// bfloat16 <-> float32 arrays. The bfloat16 kernels stage their data through these and do their
// arithmetic on float32 arrays: GCC vectorises loops that mix 16- and 32-bit elements poorly
// (SwiGLU's forward written on bfloat16 directly ran 4.5x slower than staged).
inline void widen(const c10::BFloat16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32(in[i]);
}
inline void narrow(const float* in, c10::BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_f32<c10::BFloat16>(in[i]);
}

// Sums term(0..D) in 16 float32 lanes, the lanes then added in double: the inner loop vectorises,
// and each lane adds D/16 terms, so it rounds less than one running float sum.
template <typename Term>
inline __attribute__((always_inline)) double lane_sum(int64_t D, const Term& term) {
  constexpr int64_t kLanes = 16;
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= D; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += term(i + l);
  double sum = 0;
  for (; i < D; ++i) sum += term(i);
  for (float l : lane) sum += l;
  return sum;
}

// The largest of x[0..n) (n >= 1). A row holding a NaN gives one of its values, not always the
// largest (the callers' sums of exp(x - max) are NaN for such a row either way). In GCC's vector
// type of 16 floats (one AVX-512 register in its clone, two AVX2 ones, four SSE ones): a loop of
// `v > m ? v : m` over an array of lanes stayed 16 scalar vmaxss, because without
// -ffinite-math-only GCC does not turn the select into a vector max. Exact in any order, so every
// clone returns the same value.
inline __attribute__((always_inline)) float row_max(const float* x, int64_t n) {
  typedef float Lanes __attribute__((vector_size(16 * sizeof(float))));
  constexpr int64_t kLanes = 16;
  float best = x[0];
  int64_t i = 0;
  if (n >= kLanes) {
    Lanes lanes;
    std::memcpy(&lanes, x, sizeof lanes);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      Lanes v;
      std::memcpy(&v, x + i, sizeof v);
      lanes = v > lanes ? v : lanes;
    }
    for (int64_t l = 0; l < kLanes; ++l) best = lanes[l] > best ? lanes[l] : best;
  }
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

// Cody and Waite's reduction x = n ln2 + r (ln2 split in two so n ln2 is exact), a degree-7
// polynomial for exp(r) on |r| <= ln2/2 (Cephes' expf coefficients) and 2^n built in the exponent
// bits. Within 1.5 ulp of exp on [-87, 88.37], measured against float64 over 16M points; inputs
// are clamped to that range, so exp(-inf) is 1.6e-38 rather than 0 (the callers add it to
// sums of at least 1, or multiply it into values it cannot move) and no input overflows. NaN stays NaN.
inline float exp_f32(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.37f ? 88.37f : x;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  const float shifted = x * 1.44269504088896341f + kShifter;
  const float n = shifted - kShifter;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // shifted's low bits hold n (its bits are 0x4B400000 + n); n + 127 into the exponent field.
  // Unsigned, so a NaN's bits wrap rather than overflow (p is NaN then, and so is the result).
  uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const uint32_t exponent = (bits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return p * scale;
}

}  // namespace cadre
