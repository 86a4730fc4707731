// Where a rank's parameter sits in the model's logical (global) parameter once tensor
// parallelism has split it, as PyTorch's DTensor placements say for one mesh dimension:
// Shard(dim) — this rank holds the box [offsets, offsets + local shape) of the global tensor —
// or Replicate — every rank of the group holds the whole tensor, with equal values. FSDP
// shards the local parts further; checkpoints store global boxes, so any layout reads them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace cadre {

struct Placement {
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;  // of this rank's part in the global tensor (zeros when replicated)
  bool replicated = false;       // every rank of the group holds the same whole tensor
};

struct TensorParallelLayout {
  comm::Communicator* group = nullptr;       // the mesh's tp dimension
  std::map<std::string, Placement> params;   // by parameter name from the root module
  // The placement of `name`, or null when the parameter is not split (whole on every rank).
  const Placement* find(const std::string& name) const {
    auto it = params.find(name);
    return it == params.end() ? nullptr : &it->second;
  }
};

}  // namespace cadre
