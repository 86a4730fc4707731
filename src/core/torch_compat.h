// The one place for differences between the libtorch releases Cadre builds against: Debian's
// 1.13 (C++17, CPU) and PyPI's torch 2.11 wheel (C++20, CUDA 13). Code elsewhere tests the
// CADRE_TORCH_* macros and calls the helpers below, never TORCH_VERSION_* itself.
#pragma once

#include <torch/csrc/api/include/torch/version.h>

#define CADRE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10d::ProcessGroupNCCL::shutdown() (2.4+): 2.x warns at exit about a group never shut down
// and may hang tearing it down in the destructor; 1.13 has none.
#define CADRE_TORCH_HAS_PG_SHUTDOWN CADRE_TORCH_AT_LEAST(2, 4)

// c10d::Store::clone() is pure virtual in 2.x (a second, thread-safe handle on the same store,
// which ProcessGroupNCCL's watchdog uses); 1.13 has none. Added around 2.6: only 1.13 and 2.11
// are built, so the exact first release is not checked.
#define CADRE_TORCH_STORE_HAS_CLONE CADRE_TORCH_AT_LEAST(2, 6)

// at::scaled_dot_product_attention (2.0+): fused attention kernels (flash / memory-efficient on
// CUDA, a blocked flash kernel on CPU); 1.13 has only the private _scaled_dot_product_attention.
#define CADRE_TORCH_HAS_SDPA CADRE_TORCH_AT_LEAST(2, 0)

// Gloo. Against 2.x Cadre compiles against the gloo commit that torch release pins (its gloo is
// inside libtorch_cpu; src/comm/CMakeLists.txt), against 1.13 the system's 2022 libgloo. Since
// gloo 08c094b ("use shared Stores", 2025-04) rendezvous::Context::connectFullMesh takes the
// store as a std::shared_ptr, before it a reference. Torch 2.11 pins a later gloo; 2.8 is the
// first release that can carry it, not checked.
#define CADRE_GLOO_SHARED_STORE CADRE_TORCH_AT_LEAST(2, 8)

// c10d::ProcessGroupGloo::_allgather_base and _reduce_scatter_base, what all_gather_into_tensor
// and reduce_scatter_tensor call (the latter an all-reduce of which each rank keeps its chunk):
// 1.13's Gloo throws for both; 2.3 has both (only 1.13 and 2.11 are built).
#define CADRE_TORCH_GLOO_HAS_TENSOR_COLLECTIVES CADRE_TORCH_AT_LEAST(2, 3)

// at::_fused_adamw_: one multi-tensor AdamW kernel per device and dtype, taking lr as a double
// and the step counts as float32 tensors. Its CUDA kernel came in 2.1, its CPU kernel in 2.4;
// Cadre uses it from 2.4 so that the CPU tests run the same op (only 1.13 and 2.11 are built).
// 1.13 has the at::_foreach_* ops that torch.optim.AdamW's foreach path uses instead.
#define CADRE_TORCH_HAS_FUSED_ADAMW CADRE_TORCH_AT_LEAST(2, 4)

// bfloat16 silu and products on the CPU through ATen's vectorised bfloat16 path (2.x): SwiGLU's
// forward and backward at the small Llama's [2048, 1536], one thread, 5.9 ms against Cadre's
// fused kernel's 6.5 (bench/fused_kernels); 1.13's took 19.7 ms, so there the fused kernel runs
// (models/fused_swiglu.cpp). Measured on 1.13 and 2.11 only.
#define CADRE_TORCH_FAST_BF16_SILU CADRE_TORCH_AT_LEAST(2, 0)

// c10::Allocator: allocate() is const in 1.13 and not in 2.x (2.3 on), and 2.x adds the pure
// virtual copy_data (2.3 on as well; only 1.13 and 2.11 are built).
#if CADRE_TORCH_AT_LEAST(2, 3)
#define CADRE_ALLOCATOR_ALLOCATE_CONST
#define CADRE_TORCH_ALLOCATOR_HAS_COPY_DATA 1
#else
#define CADRE_ALLOCATOR_ALLOCATE_CONST const
#define CADRE_TORCH_ALLOCATOR_HAS_COPY_DATA 0
#endif
