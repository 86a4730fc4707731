// RoPE's settings between the spellings of transformers' config.json and Cadre's model keys:
// before transformers 5 a top-level `rope_theta` and `rope_scaling` {rope_type|type, factor, ...};
// from 5 on `rope_parameters` {rope_type, rope_theta, factor, ...}.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <utility>
#include <vector>

#include "models/llama/config.h"

namespace cadre {

// (Cadre key without "model.", value text) for rope_theta and, when scaled, rope_scaling and its
// parameters. A rope_type Cadre lacks, a parameter it does not know, a scaling without its
// parameters or two spellings that disagree: ConfigError naming `source` and the field.
std::vector<std::pair<std::string, std::string>> rope_keys_from_hf(const nlohmann::json& config,
                                                                     const std::string& source);

// Writes the config's RoPE into `out` in the spelling both transformers 4 (>= 4.43) and 5 read:
// top-level rope_theta, plus rope_scaling when scaled.
void rope_to_hf(const LlamaConfig& config, nlohmann::json& out);

}  // namespace cadre
