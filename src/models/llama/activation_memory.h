// What a Llama micro-batch keeps for its backward, in bytes per rank (Model::activation_bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "models/llama/config.h"
#include "models/model.h"

namespace cadre {

// What train.freeze stopped training (activation_memory.cpp: a frozen projection does not keep
// its input, and blocks before the first that trains keep nothing).
struct LlamaFrozenParts {
  std::vector<bool> blocks;  // per block: all its projections frozen (empty: none frozen)
  bool embedding = false, head = false;
};

int64_t llama_activation_bytes(const LlamaConfig& c, const ActivationShape& shape, const LlamaFrozenParts& frozen = {});

}  // namespace cadre
