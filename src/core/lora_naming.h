// How LoRA adapter factors are named, in a model's parameters and in checkpoints: beside a layer's
// "<layer>.weight" [out, in], "<layer>.lora_a" [rank, in] and "<layer>.lora_b" [out, rank]
// (models/lora.h adds them; ckpt/ exports them).
#pragma once

#include <string>

namespace cadre {

inline bool lora_name_ends_with(const std::string& s, const char* suffix) {
  const std::string tail(suffix);
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Whether a parameter name is an adapter factor's.
inline bool lora_is_adapter(const std::string& name) {
  return lora_name_ends_with(name, ".lora_a") || lora_name_ends_with(name, ".lora_b");
}

// "<layer>.lora_a" or "<layer>.lora_b" -> "<layer>".
inline std::string lora_layer_of(const std::string& factor) { return factor.substr(0, factor.size() - 7); }

}  // namespace cadre
