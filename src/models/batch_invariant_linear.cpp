// Row-invariant GEMM kernels: a register tile of up to 4 x 4 output elements, each with its
// own 16-lane accumulator, so tiling and threading never change any element's arithmetic.
#include "models/batch_invariant_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "models/batch_invariant_lanes.h"
#include "models/bf16_dot_tiles.h"

namespace cadre {
namespace {

using lanes::bf16_bits;
using lanes::kLanes;
using lanes::kTile;
using lanes::reduce_avx512;
using lanes::reduce_lanes;
using lanes::widen;
constexpr int64_t kBlock = 16;  // rows of W per unit of parallel work

// Portable path: the AVX-512 arithmetic spelled out lane by lane (std::fma is one rounding,
// as the vector FMA; a lane past K adds 0 * 0, as the masked load does).
template <typename W>
void tile_portable(const float* x, int64_t ldx, int mr, const W* w, int64_t ldw, int nr, int64_t K, float* y,
                   int64_t ldy) {
  for (int m = 0; m < mr; ++m)
    for (int n = 0; n < nr; ++n) {
      float acc[kLanes] = {};
      for (int64_t k0 = 0; k0 < K; k0 += kLanes)
        for (int l = 0; l < kLanes; ++l) {
          const int64_t k = k0 + l;
          const float a = k < K ? x[m * ldx + k] : 0.0f, b = k < K ? widen(w[n * ldw + k]) : 0.0f;
          acc[l] = std::fma(a, b, acc[l]);
        }
      y[m * ldy + n] = reduce_lanes(acc);
    }
}

CADRE_AVX512 inline __m512 load_w(const float* p) { return _mm512_loadu_ps(p); }
CADRE_AVX512 inline __m512 load_w(const bf16_bits* p) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
CADRE_AVX512 inline __m512 load_w_masked(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
CADRE_AVX512 inline __m512 load_w_masked(const bf16_bits* p, __mmask16 mask) {
  __m256i raw = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

template <int MR, int NR, typename W>
CADRE_AVX512 void tile_avx512(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t K, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    __m512 wv[NR];
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) wv[n] = load_w(w + n * ldw + k);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * ldx + k);
#pragma GCC unroll 4
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  if (k < K) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1u);
    __m512 wv[NR];
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) wv[n] = load_w_masked(w + n * ldw + k, mask);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + m * ldx + k);
#pragma GCC unroll 4
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) y[m * ldy + n] = reduce_avx512(acc[m][n]);
}

template <typename W, int MR>
void tile_avx512_rows(const float* x, int64_t ldx, const W* w, int64_t ldw, int nr, int64_t K, float* y, int64_t ldy) {
  switch (nr) {
    case 4: return tile_avx512<MR, 4>(x, ldx, w, ldw, K, y, ldy);
    case 3: return tile_avx512<MR, 3>(x, ldx, w, ldw, K, y, ldy);
    case 2: return tile_avx512<MR, 2>(x, ldx, w, ldw, K, y, ldy);
    default: return tile_avx512<MR, 1>(x, ldx, w, ldw, K, y, ldy);
  }
}

template <typename W>
void tile_avx512_any(const float* x, int64_t ldx, int mr, const W* w, int64_t ldw, int nr, int64_t K, float* y,
                     int64_t ldy) {
  switch (mr) {
    case 4: return tile_avx512_rows<W, 4>(x, ldx, w, ldw, nr, K, y, ldy);
    case 3: return tile_avx512_rows<W, 3>(x, ldx, w, ldw, nr, K, y, ldy);
    case 2: return tile_avx512_rows<W, 2>(x, ldx, w, ldw, nr, K, y, ldy);
    default: return tile_avx512_rows<W, 1>(x, ldx, w, ldw, nr, K, y, ldy);
  }
}

// The float32 kernels need what the bf16 dot products' emulated path needs: one CPU check.
bool cpu_has_avx512() { return bf16_dots::best_path() != bf16_dots::Path::Portable; }

std::atomic<KernelPath> g_limit{KernelPath::Best};

bool use_avx512() { return cpu_has_avx512() && g_limit.load(std::memory_order_relaxed) != KernelPath::Portable; }

bf16_dots::Path bf16_path() {
  switch (g_limit.load(std::memory_order_relaxed)) {
    case KernelPath::Portable: return bf16_dots::Path::Portable;
    case KernelPath::Avx512:
      return bf16_dots::best_path() == bf16_dots::Path::Portable ? bf16_dots::Path::Portable : bf16_dots::Path::Emulated;
    default: return bf16_dots::best_path();
  }
}

// Calls tile(m0, mr, n0, nr) for every register tile of an M x N output; threads split the
// columns in blocks of kBlock rows of W, never a dot product.
template <typename Tile>
void for_each_tile(int64_t M, int64_t N, const Tile& tile) {
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t n0 = b0 * kBlock; n0 < std::min(N, b1 * kBlock); n0 += kTile) {
      const int nr = static_cast<int>(std::min<int64_t>(kTile, N - n0));
      for (int64_t m0 = 0; m0 < M; m0 += kTile) tile(m0, static_cast<int>(std::min<int64_t>(kTile, M - m0)), n0, nr);
    }
  });
}

void linear_rows(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y, int64_t ldy) {
  const bool avx512 = use_avx512();
  for_each_tile(M, N, [&](int64_t m0, int mr, int64_t n0, int nr) {
    if (avx512) tile_avx512_any(x + m0 * K, K, mr, w + n0 * K, K, nr, K, y + m0 * ldy + n0, ldy);
    else tile_portable(x + m0 * K, K, mr, w + n0 * K, K, nr, K, y + m0 * ldy + n0, ldy);
  });
}

// bfloat16 weights: x rounded to bfloat16 once, then bf16 dot products (bf16_dot_tiles.h).
void linear_rows_bf16(const float* x, int64_t M, int64_t K, const bf16_bits* w, int64_t N, float* y, int64_t ldy) {
  std::vector<uint16_t> xb(static_cast<size_t>(M * K));
  bf16_dots::round_to_bf16(x, M * K, xb.data());
  const bf16_dots::Path path = bf16_path();
  for_each_tile(M, N, [&](int64_t m0, int mr, int64_t n0, int nr) {
    bf16_dots::dot_tile(path, xb.data() + m0 * K, K, mr, w + n0 * K, K, nr, K, y + m0 * ldy + n0, ldy);
  });
}

}  // namespace

void batch_invariant_linear_out(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out) {
  CADRE_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "batch_invariant_linear: x must be a contiguous float32 matrix, got ", x.sizes(), " ", x.scalar_type());
  CADRE_CHECK(weight.dim() == 2 && weight.is_contiguous() && weight.size(1) == x.size(1) &&
                  (weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kBFloat16),
              "batch_invariant_linear: weight must be a contiguous float32 or bfloat16 [N, ", x.size(1), "] matrix, got ",
              weight.sizes(), " ", weight.scalar_type());
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  CADRE_CHECK(out.dim() == 2 && out.size(0) == M && out.size(1) == N && out.scalar_type() == at::kFloat &&
                  out.stride(1) == 1,
              "batch_invariant_linear: out must be float32 [", M, ", ", N, "] with unit column stride");
  if (weight.scalar_type() == at::kFloat)
    linear_rows(x.data_ptr<float>(), M, K, weight.data_ptr<float>(), N, out.data_ptr<float>(), out.stride(0));
  else
    linear_rows_bf16(x.data_ptr<float>(), M, K, reinterpret_cast<const bf16_bits*>(weight.data_ptr()), N,
                     out.data_ptr<float>(), out.stride(0));
}

at::Tensor batch_invariant_linear(const at::Tensor& x, const at::Tensor& weight) {
  at::Tensor out = at::empty({x.size(0), weight.size(0)}, at::kFloat);
  batch_invariant_linear_out(x, weight, out);
  return out;
}

float batch_invariant_dot(const float* a, const float* b, int64_t n) {
  float y = 0;
  if (use_avx512()) tile_avx512<1, 1>(a, n, b, n, n, &y, 1);
  else tile_portable(a, n, 1, b, n, 1, n, &y, 1);
  return y;
}

void batch_invariant_dots(const float* a, const float* rows, int64_t count, int64_t n, float* out) {
  const bool avx512 = use_avx512();
  for (int64_t j = 0; j < count; j += kTile) {
    const int nr = static_cast<int>(std::min<int64_t>(kTile, count - j));
    if (avx512) tile_avx512_rows<float, 1>(a, n, rows + j * n, n, nr, n, out + j, 1);
    else tile_portable(a, n, 1, rows + j * n, n, nr, n, out + j, 1);
  }
}

namespace {

// out[o] = fma chain over j in order of h[j] * rows[j][o], from 0; then y[o] = fma(scale, out, y):
// every element's arithmetic is fixed, whichever path computes it.
template <typename W>
void lowrank_add_portable(const float* h, const W* rows, int64_t count, int64_t n, float scale, float* y) {
  for (int64_t o = 0; o < n; ++o) {
    float acc = 0.0f;
    for (int64_t j = 0; j < count; ++j) acc = std::fma(h[j], widen(rows[j * n + o]), acc);
    y[o] = std::fma(scale, acc, y[o]);
  }
}

template <typename W>
CADRE_AVX512 void lowrank_add_avx512(const float* h, const W* rows, int64_t count, int64_t n, float scale, float* y) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t o = 0; o < n; o += kLanes) {
    const __mmask16 mask = n - o >= kLanes ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - o)) - 1u);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < count; ++j)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(h[j]), load_w_masked(rows + j * n + o, mask), acc);
    _mm512_mask_storeu_ps(y + o, mask, _mm512_fmadd_ps(s, acc, _mm512_maskz_loadu_ps(mask, y + o)));
  }
}

template <typename W>
void lowrank_add(const float* x, const W* a, const W* bt, int64_t rank, int64_t in, int64_t out, float scale, float* h,
                 float* y) {
  const bool avx512 = use_avx512();
  for (int64_t j = 0; j < rank; j += kTile) {  // h = A x, as batch_invariant_dots
    const int nr = static_cast<int>(std::min<int64_t>(kTile, rank - j));
    if (avx512) tile_avx512_rows<W, 1>(x, in, a + j * in, in, nr, in, h + j, 1);
    else tile_portable(x, in, 1, a + j * in, in, nr, in, h + j, 1);
  }
  if (avx512) lowrank_add_avx512(h, bt, rank, out, scale, y);
  else lowrank_add_portable(h, bt, rank, out, scale, y);
}

}  // namespace

void batch_invariant_lowrank_add(const float* x, const at::Tensor& a, const at::Tensor& bt, float scale, float* h,
                                 float* y) {
  CADRE_CHECK(a.dim() == 2 && bt.dim() == 2 && a.size(0) == bt.size(0) && a.is_contiguous() && bt.is_contiguous() &&
                  a.scalar_type() == bt.scalar_type() &&
                  (a.scalar_type() == at::kFloat || a.scalar_type() == at::kBFloat16),
              "batch_invariant_lowrank_add: factors must be contiguous float32 or bfloat16 [rank, in] and [rank, out], got ",
              a.sizes(), " ", a.scalar_type(), " and ", bt.sizes(), " ", bt.scalar_type());
  const int64_t rank = a.size(0), in = a.size(1), out = bt.size(1);
  if (a.scalar_type() == at::kFloat)
    lowrank_add(x, a.data_ptr<float>(), bt.data_ptr<float>(), rank, in, out, scale, h, y);
  else
    lowrank_add(x, reinterpret_cast<const bf16_bits*>(a.data_ptr()), reinterpret_cast<const bf16_bits*>(bt.data_ptr()),
                rank, in, out, scale, h, y);
}

const char* batch_invariant_linear_isa() {
  if (bf16_path() == bf16_dots::Path::Hardware) return "avx512_bf16";
  return use_avx512() ? "avx512" : "portable";
}

void batch_invariant_linear_limit(KernelPath path) { g_limit = path; }

}  // namespace cadre
