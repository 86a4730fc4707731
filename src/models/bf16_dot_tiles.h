// The arithmetic of batch_invariant_linear for bfloat16 weights: the input row is rounded to
// bfloat16 (as a bf16 matmul takes it) and each output element is one dot product of bf16 pairs
// in 16 float lanes, exactly as the AVX-512 instruction VDPBF16PS defines it: lane j of a block of
// 32 holds the pair (2j, 2j + 1); the odd element's product is added first, then the even one's,
// each sum rounded to nearest even (the products of two bf16 values are exact in float32, so each
// step is one fused multiply-add), inputs and sums below 2^-126 taken as zero. The lanes then
// reduce by the fixed tree of batch_invariant_lanes.h. Three paths give the same bits: the
// instruction itself (AVX-512 BF16: Zen 4, Sapphire Rapids and later), fused multiply-adds on
// AVX-512 with the flush-to-zero modes set, and portable scalar code.
#pragma once

#include <cstdint>

namespace cadre::bf16_dots {

enum class Path { Hardware, Emulated, Portable };

// The fastest path this CPU runs (Emulated needs AVX-512, Hardware also AVX-512 BF16).
Path best_path();

// Rounds n float32 values to bfloat16: to nearest, ties to even; zeros and values below 2^-126
// become zeros of their sign; NaNs stay NaNs.
void round_to_bf16(const float* x, int64_t n, uint16_t* out);

// y[m * ldy + n] = the dot of x row m with w row n (K elements each) for m < mr, n < nr (each at
// most 4), on `path`.
void dot_tile(Path path, const uint16_t* x, int64_t ldx, int mr, const uint16_t* w, int64_t ldw, int nr, int64_t K,
              float* y, int64_t ldy);

}  // namespace cadre::bf16_dots
