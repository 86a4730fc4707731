// Float32 linear layers through oneDNN's sgemm, which it generates for the running CPU's ISA.
// libtorch sends float32 matmuls to its BLAS: OpenBLAS in Debian's 1.13, MKL in the 2.x wheel,
// whose sgemm takes a slower path on AMD CPUs. bfloat16 linears widen to it where libtorch has
// no fast bfloat16 GEMM (bf16_widening.h); other dtypes and devices fall back to at::linear.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// y = x W^T for x [..., in], W [out, in]; differentiable in x and W.
at::Tensor linear_no_bias(const at::Tensor& x, const at::Tensor& weight);

// The pieces of its backward, for x2 = x as [M, in] and g2 = the output's gradient as [M, out]:
// g2 W, g2^T x2, and grad += g2^T x2 in one GEMM (grad [out, in], contiguous, the weight's dtype).
at::Tensor linear_input_grad(const at::Tensor& g2, const at::Tensor& weight);
at::Tensor linear_weight_grad(const at::Tensor& g2, const at::Tensor& x2);
void linear_weight_grad_add(const at::Tensor& g2, const at::Tensor& x2, at::Tensor& grad);

// Whether float32 CPU linears use oneDNN: on unless CADRE_DNNL_LINEAR=0 (then libtorch's BLAS,
// as Python's at::linear). Measured 1.6x (OpenBLAS) and 1.7x (MKL) end to end in float32 on an
// AVX-512 AMD EPYC, +8% on an older one (docs/benchmarks.md). A different GEMM rounds
// differently: single passes agree with PyTorch's to 1e-6; tests judge training against float64
// references, with tolerances that hold for either GEMM. A program that installs signal
// handlers must keep them off the threads that run it (core/signal_thread.h).
bool dnnl_linear_enabled();

}  // namespace cadre
