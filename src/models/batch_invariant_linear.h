// y = x W^T computed row by row with an arithmetic that does not depend on how many rows are
// computed together: every output element is one dot product accumulated in 16 float lanes
// (fused multiply-add, k in order) and reduced by one fixed tree. A sequence's logits are then
// bit for bit the same whether it is decoded alone or batched with others, and whether its
// prompt is processed in one call or token by token (batch invariance, which a BLAS GEMM does
// not promise: its blocking, and so its rounding, changes with the matrix shape). Float32 weights
// take x as it is (FMA chains in float32); bfloat16 weights take x rounded to bfloat16, as a bf16
// matmul does, and add bf16 pairs as the VDPBF16PS instruction defines (bf16_dot_tiles.h: twice
// the multiply-adds per instruction of widening the weights). Every path — AVX-512 (with or
// without its bf16 dot products) and portable code — gives identical bits, so the same prompt
// decodes the same on any x86-64. Threads split the output columns, never a dot product.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// x [M, K] float32 contiguous, weight [N, K] float32 or bfloat16 contiguous -> [M, N] float32
// (with bfloat16 weights, of x rounded to bfloat16).
at::Tensor batch_invariant_linear(const at::Tensor& x, const at::Tensor& weight);

// The same into `out` ([M, N] float32 contiguous, e.g. a slice of a bigger buffer).
void batch_invariant_linear_out(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out);

// A dot product of two float32 vectors of length n with the same arithmetic (attention scores).
float batch_invariant_dot(const float* a, const float* b, int64_t n);

// out[j] = batch_invariant_dot(a, rows + j * n, n) for j < count, bit for bit: one vector
// against `count` contiguous rows (a query against its cached keys), four rows per register
// tile, on the calling thread.
void batch_invariant_dots(const float* a, const float* rows, int64_t count, int64_t n, float* out);

// y[o] += scale * (B (A x))[o] for one row (a LoRA delta), with the same promise: h = A x as
// batch_invariant_dots computes it (a [rank, in], x [in]), then each output element one fused
// multiply-add chain over h in order (bt = B^T [rank, out]) and one fused multiply-add of the
// scale into y. Factors float32 or bfloat16 (both the same); h is scratch of `rank` floats.
void batch_invariant_lowrank_add(const float* x, const at::Tensor& a, const at::Tensor& bt, float scale, float* h,
                                 float* y);

// "avx512_bf16" (bf16 weights through the CPU's bf16 dot products), "avx512" or "portable": the
// path this CPU takes.
const char* batch_invariant_linear_isa();

// Caps the kernels at a lesser path: Avx512 without the bf16 dot instructions (emulated with
// FMAs), or Portable (tests compare the paths bit for bit; a CPU whose vector units are suspect
// can be run without them). Not thread-safe against concurrent kernels.
enum class KernelPath { Best, Avx512, Portable };
void batch_invariant_linear_limit(KernelPath path);

}  // namespace cadre
