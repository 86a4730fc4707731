// Rotary position embedding's frequencies for a Llama config, with its scaling (none, linear,
// llama3) applied, as transformers' rope_type of the same name computes them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "models/llama/config.h"

namespace cadre {

// Inverse frequencies theta^(-2i/head_dim) for i < head_dim/2, scaled; float64 [head_dim/2].
at::Tensor rope_inv_freq(const LlamaConfig& config, int64_t head_dim);

}  // namespace cadre
