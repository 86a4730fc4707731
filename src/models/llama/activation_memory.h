// What a Llama micro-batch keeps for its backward, in bytes per rank (Model::activation_bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "models/llama/config.h"
#include "models/model.h"

namespace cadre {

// What train.freeze stopped training (activation_memory.cpp: a frozen projection does not keep
// its input, and blocks before the first that trains keep nothing), and what a pipeline stage
// holds (Model::keep_pipeline_stage): its blocks, and the embedding and head only on the first
// and last stage.
struct LlamaFrozenParts {
  std::vector<bool> blocks;  // per block held: all its projections frozen (empty: none frozen)
  bool embedding = false, head = false;
  int64_t blocks_held = -1;  // -1: every block
  bool head_held = true;
};

int64_t llama_activation_bytes(const LlamaConfig& c, const ActivationShape& shape, const LlamaFrozenParts& frozen = {});

}  // namespace cadre
