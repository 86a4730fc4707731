// How LoRA adapter factors are named, in a model's parameters and in checkpoints: beside a layer's
// "<layer>.weight" [out, in], "<layer>.lora_a" [rank, in] and "<layer>.lora_b" [out, rank]
// (models/lora.h adds them; ckpt/ exports them).
#pragma once

#include <string>

#include "core/text.h"

namespace cadre {

// Whether a parameter name is an adapter factor's.
inline bool lora_is_adapter(const std::string& name) {
  return ends_with(name, ".lora_a") || ends_with(name, ".lora_b");
}

// "<layer>.lora_a" or "<layer>.lora_b" -> "<layer>".
inline std::string lora_layer_of(const std::string& factor) { return factor.substr(0, factor.size() - 7); }

}  // namespace cadre
