// Float32 linear layers through oneDNN's sgemm. libtorch 1.13 sends float32 matmuls to the
// system BLAS (OpenBLAS here); oneDNN's AVX-512 sgemm is faster on this CPU class. Other
// dtypes and devices fall back to at::linear.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// y = x W^T for x [..., in], W [out, in]; differentiable in x and W.
at::Tensor linear_no_bias(const at::Tensor& x, const at::Tensor& weight);

// Whether float32 CPU linears use oneDNN: CADRE_DNNL_LINEAR=1 turns it on. Off by default
// until measured faster on a quiet machine (bench/train_throughput.py runs both). A different
// GEMM than Python's changes rounding: single forward/backward passes still agree with
// PyTorch to 1e-6, but Adam amplifies the difference in near-zero gradients over steps.
bool dnnl_linear_enabled();

}  // namespace cadre
