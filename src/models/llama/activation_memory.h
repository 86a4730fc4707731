// What a Llama micro-batch keeps for its backward, in bytes per rank (Model::activation_bytes).
#pragma once

#include <cstdint>

#include "models/llama/config.h"
#include "models/model.h"

namespace cadre {

int64_t llama_activation_bytes(const LlamaConfig& c, const ActivationShape& shape);

}  // namespace cadre
