// Parameters built without storage, materialised in shards. A model built "deferred" gives each
// parameter its shape and dtype but no bytes (a CPU tensor whose storage is empty: libtorch
// 1.13 cannot set_data a meta tensor to a real one, and modules keep their parameters as
// members, so the tensor objects must stay and only their storage arrive later). Sharding then
// allocates each rank's own shard on its device and fills it from a ParamSource
// (core/param_source.h): nothing is ever allocated for the whole model, nothing broadcast.
//
// Until sharding fills it, a deferred parameter may be reshaped (tensor parallelism replaces it
// by its part, deferred_empty of the part's shape) but never read or written.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "core/param_source.h"
#include "shard/placement.h"

namespace cadre {

// A float32 CPU tensor of `sizes` with no storage behind it.
at::Tensor deferred_empty(at::IntArrayRef sizes);

// True for a tensor with elements and no storage: a deferred parameter before sharding (and,
// after it, a sharded parameter whose unit is resharded: ask only before).
bool has_no_storage(const at::Tensor& t);

// Elements [start, start + out.numel()) of this rank's part of parameter `name` (flattened
// row-major over `local_shape`; `where` places the part in the global tensor, null when it is
// the whole tensor), read from `source` into `out` (float32, contiguous, 1-D, any device). Each
// contiguous run of the global tensor is one source read.
void fill_from_source(const ParamSource& source, const std::string& name, at::IntArrayRef local_shape,
                      const Placement* where, int64_t start, at::Tensor out);

}  // namespace cadre
