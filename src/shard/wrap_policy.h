// Wrap policies: which blocks form each FSDP unit. By module type, every transformer block is a
// unit (FSDP's transformer_auto_wrap_policy); by parameter count, consecutive blocks are
// grouped until a unit holds at least `min_params` (size_based_auto_wrap_policy). Whatever no
// unit takes (embedding, final norm, head) is the root unit.
#pragma once

#include <cstdint>
#include <vector>

namespace cadre {

// block_params[i] = parameter count of block i. Returns the units as lists of block indices,
// in order; min_params == 0 means one block per unit. A short tail joins the last unit.
std::vector<std::vector<int64_t>> wrap_blocks(const std::vector<int64_t>& block_params, int64_t min_params);

}  // namespace cadre
