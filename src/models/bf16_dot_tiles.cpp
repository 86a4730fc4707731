// Register tiles of bf16 dot products (bf16_dot_tiles.h): up to 4 x 4 output elements, each in
// its own 16-lane accumulator, so tiling and threading never change an element's arithmetic.
#include "models/bf16_dot_tiles.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "models/batch_invariant_lanes.h"

#define CADRE_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

namespace cadre::bf16_dots {
namespace {

using lanes::kLanes;
constexpr int64_t kPairs = 2 * kLanes;  // bf16 elements per accumulator step

// The elements left past the last whole block, as a mask of 16-bit elements.
inline __mmask32 tail_mask(int64_t left) { return static_cast<__mmask32>((uint64_t(1) << left) - 1u); }

// 32 bf16 elements from p; masked, the elements past the mask are 0 (and a sum plus 0 * 0 is the sum).
template <bool kMasked>
CADRE_AVX512 inline __m512i load_pairs(const uint16_t* p, __mmask32 mask) {
  if constexpr (kMasked) return _mm512_maskz_loadu_epi16(mask, p);
  else return _mm512_loadu_si512(p);
}

template <int MR, int NR, bool kMasked>
CADRE_AVX512_BF16 inline void step_hardware(__m512 (&acc)[MR][NR], const uint16_t* x, int64_t ldx, const uint16_t* w,
                                            int64_t ldw, __mmask32 mask) {
  __m512i wv[NR];
#pragma GCC unroll 4
  for (int n = 0; n < NR; ++n) wv[n] = load_pairs<kMasked>(w + n * ldw, mask);
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    const __m512bh xv = reinterpret_cast<__m512bh>(load_pairs<kMasked>(x + m * ldx, mask));
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, reinterpret_cast<__m512bh>(wv[n]));
  }
}

// The odd and even elements of 16 bf16 pairs as two float32 vectors (exact).
CADRE_AVX512 inline __m512 odd_of(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int(0xffff0000u))));
}
CADRE_AVX512 inline __m512 even_of(__m512i pairs) { return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)); }

template <int MR, int NR, bool kMasked>
CADRE_AVX512 inline void step_emulated(__m512 (&acc)[MR][NR], const uint16_t* x, int64_t ldx, const uint16_t* w,
                                       int64_t ldw, __mmask32 mask) {
  __m512 w_odd[NR], w_even[NR];
#pragma GCC unroll 4
  for (int n = 0; n < NR; ++n) {
    const __m512i wv = load_pairs<kMasked>(w + n * ldw, mask);
    w_odd[n] = odd_of(wv);
    w_even[n] = even_of(wv);
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    const __m512i xv = load_pairs<kMasked>(x + m * ldx, mask);
    const __m512 x_odd = odd_of(xv), x_even = even_of(xv);
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n)
      acc[m][n] = _mm512_fmadd_ps(x_even, w_even[n], _mm512_fmadd_ps(x_odd, w_odd[n], acc[m][n]));
  }
}

template <int MR, int NR>
CADRE_AVX512 inline void zero(__m512 (&acc)[MR][NR]) {
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
}

template <int MR, int NR>
CADRE_AVX512 inline void reduce_into(__m512 (&acc)[MR][NR], float* y, int64_t ldy) {
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) y[m * ldy + n] = lanes::reduce_avx512(acc[m][n]);
}

template <int MR, int NR>
CADRE_AVX512_BF16 void tile_hardware(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t K,
                                     float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  zero(acc);
  int64_t k = 0;
  for (; k + kPairs <= K; k += kPairs) step_hardware<MR, NR, false>(acc, x + k, ldx, w + k, ldw, 0);
  if (k < K) step_hardware<MR, NR, true>(acc, x + k, ldx, w + k, ldw, tail_mask(K - k));
  reduce_into(acc, y, ldy);
}

// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6): what VDPBF16PS always does.
constexpr unsigned kFlushModes = 0x8040;

template <int MR, int NR>
CADRE_AVX512 void tile_emulated(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t K, float* y,
                                int64_t ldy) {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | kFlushModes);
  __m512 acc[MR][NR];
  zero(acc);
  int64_t k = 0;
  for (; k + kPairs <= K; k += kPairs) step_emulated<MR, NR, false>(acc, x + k, ldx, w + k, ldw, 0);
  if (k < K) step_emulated<MR, NR, true>(acc, x + k, ldx, w + k, ldw, tail_mask(K - k));
  _mm_setcsr(saved);  // the lanes reduce as on the other paths, in the caller's modes
  reduce_into(acc, y, ldy);
}

// Portable: VDPBF16PS lane by lane. Flushing after each rounded sum is the flush-to-zero mode;
// inputs are flushed as they are read (denormals-are-zero).
inline float flushed(float v) { return std::fabs(v) < FLT_MIN ? std::copysign(0.0f, v) : v; }
inline float element(const uint16_t* row, int64_t k, int64_t K) { return k < K ? flushed(lanes::widen(row[k])) : 0.0f; }

void tile_portable(const uint16_t* x, int64_t ldx, int mr, const uint16_t* w, int64_t ldw, int nr, int64_t K, float* y,
                   int64_t ldy) {
  for (int m = 0; m < mr; ++m)
    for (int n = 0; n < nr; ++n) {
      float acc[kLanes] = {};
      const uint16_t* xr = x + m * ldx;
      const uint16_t* wr = w + n * ldw;
      for (int64_t k0 = 0; k0 < K; k0 += kPairs)
        for (int l = 0; l < kLanes; ++l) {
          const int64_t k = k0 + 2 * l;
          acc[l] = flushed(std::fma(element(xr, k + 1, K), element(wr, k + 1, K), acc[l]));
          acc[l] = flushed(std::fma(element(xr, k, K), element(wr, k, K), acc[l]));
        }
      y[m * ldy + n] = lanes::reduce_lanes(acc);
    }
}

template <int MR>
void tile_rows(Path path, const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw, int nr, int64_t K, float* y,
               int64_t ldy) {
  using Tile = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t);
  static constexpr Tile hardware[4] = {tile_hardware<MR, 1>, tile_hardware<MR, 2>, tile_hardware<MR, 3>,
                                       tile_hardware<MR, 4>};
  static constexpr Tile emulated[4] = {tile_emulated<MR, 1>, tile_emulated<MR, 2>, tile_emulated<MR, 3>,
                                       tile_emulated<MR, 4>};
  (path == Path::Hardware ? hardware : emulated)[nr - 1](x, ldx, w, ldw, K, y, ldy);
}

}  // namespace

Path best_path() {
  static const Path path = [] {
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("fma");
    if (!avx512) return Path::Portable;
    return __builtin_cpu_supports("avx512bf16") ? Path::Hardware : Path::Emulated;
  }();
  return path;
}

void round_to_bf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    if ((u & 0x7f800000u) == 0) out[i] = static_cast<uint16_t>((u >> 16) & 0x8000u);              // zero, subnormal
    else if ((u & 0x7fffffffu) > 0x7f800000u) out[i] = static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays NaN
    else out[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

void dot_tile(Path path, const uint16_t* x, int64_t ldx, int mr, const uint16_t* w, int64_t ldw, int nr, int64_t K,
              float* y, int64_t ldy) {
  switch (path == Path::Portable ? 0 : mr) {
    case 4: return tile_rows<4>(path, x, ldx, w, ldw, nr, K, y, ldy);
    case 3: return tile_rows<3>(path, x, ldx, w, ldw, nr, K, y, ldy);
    case 2: return tile_rows<2>(path, x, ldx, w, ldw, nr, K, y, ldy);
    case 1: return tile_rows<1>(path, x, ldx, w, ldw, nr, K, y, ldy);
    default: return tile_portable(x, ldx, mr, w, ldw, nr, K, y, ldy);
  }
}

}  // namespace cadre::bf16_dots
