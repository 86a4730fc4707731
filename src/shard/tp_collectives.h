// The two collectives tensor parallelism needs, as autograd functions over a Communicator
// (Megatron-LM's f and g). A column-parallel layer reads its input through
// copy_to_tp_region, a row-parallel layer's partial output goes through
// reduce_from_tp_region: one all-reduce per pair in the forward and one in the backward.
// Model-agnostic: any module split over a tensor-parallel group uses them.
#pragma once

#include <ATen/core/Tensor.h>

#include "comm/comm.h"

namespace cadre {

// Forward: x unchanged (every rank of `group` holds the same x). Backward: the gradient is
// summed over the group (each rank's part of the layer contributed a partial gradient of x).
at::Tensor copy_to_tp_region(const at::Tensor& x, comm::Communicator& group);

// Forward: x summed over the group (each rank holds a partial sum). Backward: the gradient
// unchanged (the sum's gradient reaches every term as it is).
at::Tensor reduce_from_tp_region(const at::Tensor& x, comm::Communicator& group);

}  // namespace cadre
