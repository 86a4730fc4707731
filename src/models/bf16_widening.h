// bfloat16 products as float32 GEMMs where libtorch has no fast bfloat16 GEMM for the CPU.
//
// libtorch gives bfloat16 matmuls to oneDNN only where the CPU has AVX-512 (BW, VL and DQ);
// elsewhere (an AVX2-only Zen 3 or Haswell) it runs reference loops, 10-100x slower than its
// float32 GEMMs (docs/benchmarks.md), and a bfloat16 training step with them. There the inputs
// are widened to float32 (exactly), multiplied by the float32 GEMM and the result rounded once to
// bfloat16: the arithmetic of libtorch's bfloat16 GEMM (float32 sums, one rounding), another
// summation order. Only the bfloat16 inputs are saved for backward, not widened copies.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace cadre {

// Whether bfloat16 CPU products widen: CADRE_BF16_LINEAR=auto (default: where the CPU has no
// AVX-512), widen or native; set_bf16_linear_widens overrides both from then on (tests and
// benchmarks). Another value is a ConfigError naming the variable.
bool bf16_linear_widens();
void set_bf16_linear_widens(bool widens);
// The choice CADRE_BF16_LINEAR's `value` makes on a CPU with or without a fast bfloat16 GEMM.
bool bf16_widening_choice(const std::string& value, bool cpu_has_fast_gemm);

// a @ b for [N, m, k] x [N, k, n] bfloat16 CPU tensors, one float32 GEMM per matrix on widened
// copies (libtorch's float32 bmm is slower than that without MKL); differentiable in a and b.
at::Tensor widened_bmm(const at::Tensor& a, const at::Tensor& b);

}  // namespace cadre
