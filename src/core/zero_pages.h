// Zero-filled CPU vectors that cost no memory until written: anonymous pages the kernel zeroes
// when they are first touched.
//
// Why: a zero fill touches every page at once. For a gradient shard or optimizer state that is
// only written in the first step, that moves the faulting-in of gigabytes (slow on a VM, where
// fresh guest memory first faults on the host too) from the step that uses them to start-up,
// and a rank that loads a model and never trains (train.steps 0) would hold it all for nothing.
// PyTorch's optimizers create their state at the first step for the same reason.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// A contiguous zero vector of `numel` elements. On the CPU from 1 MiB up it is its own anonymous
// mapping (huge pages where the kernel allows them on request, so the first touch faults once per
// 2 MiB); it is never resized (its storage has no allocator behind it). Smaller vectors and
// other devices are at::zeros.
at::Tensor zeros_on_first_touch(int64_t numel, const at::TensorOptions& options);

}  // namespace cadre
